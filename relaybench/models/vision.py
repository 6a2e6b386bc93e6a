"""Vision workloads: ResNet, MobileNet V2, VGG, DQN."""

__all__: list = []
