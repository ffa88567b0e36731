//! Egress proxy (see issue 5).
