"""What `git xet COMMAND` does, one module per command or family (cli.py parses the arguments and
calls these): configuring git (install, clone, setup-repo), checking it (doctor), the local cache, and
a server operator's commands over its store (store_admin, server_tokens, migrate, lfs_authenticate)."""
