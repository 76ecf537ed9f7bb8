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
    let mut console = fluxio_ui::Console::new(store);
    if args.allow_actions {
        console = console.allow_actions();
    }
    if let Some(token) = &args.token {
        console = console
            .token(token.as_str())
            .map_err(|e| Failure::usage(e.to_string()))?;
    }
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.bind)))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() && args.token.is_none() {
        let may = if args.allow_actions {
            "sees every run and may act on it (give --token)"
        } else {
            "sees every run"
        };
        note(&format!(
            "fluxio: warning: listening on {addr}, not a loopback address, without a token: \
             whoever reaches it {may}; put it behind your own authentication"
        ));
    }
    let mode = match (args.allow_actions, args.token.is_some()) {
        (false, _) => "read-only",
        (true, false) => "actions allowed",
        (true, true) => "actions allowed to who signs in with the token",
    };
    // the first line says where: a script (or a test) reads it
    writeln!(
        out.out,
        "fluxio console on http://{addr}/ ({mode}; Ctrl-C stops it)"
    )?;
    out.out.flush()?;
    let app = console.router();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
