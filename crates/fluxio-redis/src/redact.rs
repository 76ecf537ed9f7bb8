//! Keeping the URL's password out of every string this crate produces:
//! the shared [`RedactedUrl`](fluxio_core::store::RedactedUrl) of fluxio-core.

pub(crate) use fluxio_core::store::RedactedUrl as Redacted;
