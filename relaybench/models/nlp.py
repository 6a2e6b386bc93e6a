"""NLP workloads: RNN, GRU, LSTM, CharRNN, TreeLSTM."""

__all__: list = []
