//! End-to-end tests live in `tests/`; `src/bin/` holds the one process they start.
