"""A second process for the journal lock tests: holds one thread's journal until told.

Usage: python journal_writer_proc.py DIRECTORY THREAD_ID

Appends one turn through a bound Thread (which takes the journal's lock), prints
"locked", then reads stdin: each line "append N" appends N more turns. At the end of
input it closes the repository (releasing the lock), prints "closed" and exits.
"""

from __future__ import annotations

import sys

from ore_core import Role, Text, Thread
from ore_core.ledger.file_repository import FileRepository


def main() -> None:
    directory, thread_id = sys.argv[1:3]
    with FileRepository(directory) as repository:
        thread = Thread.from_journal(repository, thread_id)
        thread.append(Role.USER, Text("held by the child"))
        print("locked", flush=True)
        for line in sys.stdin:
            command, count = line.split()
            assert command == "append", line
            for n in range(int(count)):
                thread.append(Role.ASSISTANT, Text(f"child {n}"))
    print("closed", flush=True)


if __name__ == "__main__":
    main()
