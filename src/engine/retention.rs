//! The retention guard: facts that must survive a summary (peers.md §4 #4).
