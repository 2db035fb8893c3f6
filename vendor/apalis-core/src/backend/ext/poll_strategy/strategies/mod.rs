mod stream;
pub use stream::*;
#[cfg(feature = "sleep")]
mod interval;
#[cfg(feature = "sleep")]
pub use interval::*;
mod future;
pub use future::*;
#[cfg(feature = "sleep")]
mod backoff;
#[cfg(feature = "sleep")]
pub use backoff::*;
