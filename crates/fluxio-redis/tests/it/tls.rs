//! `rediss://` end to end: a TLS Redis started for the test, with a CA made
//! for it by the `openssl` command. Skipped (loudly) when `redis-server` or
//! `openssl` is not installed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fluxio_core::store::CheckpointStore;
use fluxio_core::{Context, Error};
use fluxio_redis::{RedisStore, RedisStoreError};
use fluxio_test_support::{self as support, checkpoint};

use crate::{OwnServer, installed};

fn run(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
fn make_certificates(dir: &Path) {
    run(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=fluxio test CA",
        ],
    );
    run(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("write san.cnf");
    run(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
        ],
    );
}

/// A TLS `redis-server` with the certificates of [`make_certificates`]
/// (`--port 0`: no plain port).
fn start_tls_redis() -> OwnServer {
    let args = |port: &str| {
        [
            "--port",
            "0",
            "--tls-port",
            port,
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.crt",
            "--tls-auth-clients",
            "no",
        ]
        .map(str::to_owned)
        .to_vec()
    };
    OwnServer::spawn("tls", make_certificates, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_verifies_the_server_and_works() {
    if !installed("redis-server", "--version") || !installed("openssl", "version") {
        support::skip(&"the TLS test needs `redis-server` and `openssl` on PATH");
        return;
    }
    let server = start_tls_redis();
    let url = format!("rediss://127.0.0.1:{}", server.port);

    // Mozilla's roots do not include the test CA: the handshake is refused
    let err = crate::connect_within(&url, Duration::from_secs(5))
        .await
        .expect_err("an unknown CA is refused");
    let Error::Store { source, .. } = &err else {
        panic!("{err:?}")
    };
    let source = source.downcast_ref::<RedisStoreError>().expect("ours");
    assert!(!source.kind().is_timeout(), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // trusting the test CA
    let ca = std::fs::read(server.dir.join("ca.crt")).expect("ca.crt");
    let store = RedisStore::builder(&url)
        .tls_root_certificates(ca)
        .key_prefix("fx_tls")
        .completed_retention(Some(Duration::from_secs(60)))
        .connect()
        .await
        .expect("connect over TLS");
    let mut cp = checkpoint("r", 1);
    cp.context = Context::new().set("k", "v").expect("serializes").snapshot();
    let lease = store
        .acquire_lease("r", Duration::from_secs(5))
        .await
        .expect("acquire");
    store
        .save_fenced(cp.clone(), &lease)
        .await
        .expect("save_fenced");
    assert_eq!(store.load("r").await.expect("load"), Some(cp));
    store.release_lease(lease).await.expect("release");
}
