"""Stand-in of ``trl.models`` (tests only)."""
