//! Bounding the summarizer's input to its window (DESIGN §3 deviation 8).
