//! Tools for measuring and exercising Receipt from outside: servers of a
//! run's own (used by the soak and by the fault tests), besides the
//! `receipt-bench` and `receipt-soak` binaries.

pub mod servers;
