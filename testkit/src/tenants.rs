//! The two tenants every test environment grants ([`crate::test_settings`]),
//! and the keys a client of its api sends ([`crate::Api`]).

/// The key of `tenant-a`, which a client sends unless told otherwise.
pub const KEY_A: &str = "test-key-tenant-a";
/// The key of `tenant-b`.
pub const KEY_B: &str = "test-key-tenant-b";
