//! `InMemoryStore` passes the store conformance suite.

use fluxio_core::store::conformance::SharedMemory;

async fn harness() -> Option<SharedMemory> {
    Some(SharedMemory::default())
}

fluxio_core::store_conformance_tests!(harness);
