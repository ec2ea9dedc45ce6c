"""The kernel: runs the observe → think → act loop on a session (independent of pygls)."""
