//! The checkpoint arithmetic of DLIO's `base_checkpointing.py` (reference part A2).
