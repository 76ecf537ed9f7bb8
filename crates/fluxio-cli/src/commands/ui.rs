//! `fluxio ui` (contract rule 38): the web console over the store, served
//! until Ctrl-C.

use std::sync::Arc;

use fluxio_core::CheckpointStore;

use super::{Out, note};
use crate::args::UiArgs;
use crate::exit::Failure;

pub(crate) async fn serve(
    out: &mut Out<'_>,
    store: Arc<dyn CheckpointStore>,
    args: &UiArgs,
) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.bind)))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        note(&format!(
            "fluxio: warning: listening on {addr}, not a loopback address: whoever reaches it \
             sees every run; put it behind your own authentication"
        ));
    }
    // the first line says where: a script (or a test) reads it
    writeln!(
        out.out,
        "fluxio console on http://{addr}/ (read-only; Ctrl-C stops it)"
    )?;
    out.out.flush()?;
    let app = fluxio_ui::Console::new(store).router();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
