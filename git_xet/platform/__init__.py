"""Everything that depends on the operating system, behind one module per concern, each with a
portable default: file locks (locks.py), durable atomic files (files.py), memory maps and
allocator tuning (memory.py), a child dying with its parent (parent_death.py), the agents'
local sockets (local_sockets.py), sendfile (sendfile.py), other processes (processes.py), running
git (gitcmd.py), private files and directories (private_paths.py), and a producer run ahead of its
consumer in a thread (readahead.py).
`GIT_XET_PORTABLE=1` (switch.py) turns every accelerator off, so that the portable path runs
here too. It sits on the core (core <- platform <- storage, client): every layer above may use it. Nothing outside
it imports fcntl or msvcrt or reads /proc (tests/unit/test_platform_seam.py)."""
