"""``python -m dpmed``: the ``dpmed`` command, for environments where the script is not on PATH."""

from dpmed.cli import command

if __name__ == "__main__":
    command()
