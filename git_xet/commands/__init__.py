"""User-facing subcommands that configure git (install, uninstall, track, doctor, cache)."""
