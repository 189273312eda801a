//! End-to-end tests live in `tests/`; `src/bin/` holds the processes they start.
