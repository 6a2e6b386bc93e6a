"""Write the tutorial notebooks from their sources here and execute them in place.

    python notebooks/src/build.py            # every notebook
    python notebooks/src/build.py 03         # the ones whose number is given

Each ``nbNN.py`` writes ``notebooks/NN_*.ipynb`` (cells only); this script then runs it with
nbclient so the saved outputs are the ones nbval compares against (cells marked
``# NBVAL_CHECK_OUTPUT``).
"""

import pathlib
import runpy
import sys

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
NOTEBOOKS = HERE.parent


def main(argv) -> int:
    wanted = argv or sorted(p.stem[2:] for p in HERE.glob("nb[0-9][0-9].py"))
    for number in wanted:
        runpy.run_path(str(HERE / f"nb{number}.py"))
        (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        nbformat.write(nb, path)
        print("executed", path.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
