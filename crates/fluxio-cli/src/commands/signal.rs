//! `fluxio runs signal RUN WAIT '{...}'` and `fluxio runs wake RUN`:
//! an operator's signal to a waiting run and "now" for a parked one
//! (contract rules 25-26), without the pipeline's types.

use fluxio_core::store::{Delivery, Payload, Signal, wake_run};
use fluxio_core::{CheckpointStore, Error, Value};
use serde_json::json;

use super::{Out, not_found};
use crate::args::SignalArgs;
use crate::exit::Failure;
use crate::render::{shown, when};

/// Who the history says sent the CLI's signals, unless `--sender` says.
const SENDER: &str = "fluxio CLI";

pub(crate) async fn signal(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    args: &SignalArgs,
) -> Result<(), Failure> {
    let key = args.run.as_str();
    fluxio_core::store::check_wait_name(&args.wait)
        .map_err(|e| Failure::usage(e.message_with_causes()))?;
    let value = payload(args)?;
    let Some(latest) = store.load(key).await? else {
        return Err(not_found(key));
    };
    // the run's code names its waits: a name it has none of is refused here,
    // as the pipeline's `signal` refuses it (the payload's type is checked
    // by the run when it takes the signal)
    if let Some(structure) = &latest.structure {
        let available = structure.wait_names();
        if !available.contains(&args.wait) {
            return Err(Failure::of(&Error::UnknownWait {
                run_id: key.to_owned(),
                wait: args.wait.clone(),
                available,
            }));
        }
    }
    let payload = Payload::from_value(&value)?;
    let sender = args.sender.as_deref().unwrap_or(SENDER);
    let delivered = store
        .send_signal(key, Signal::new(&args.wait, payload, sender)?)
        .await?;
    let duplicate = delivered == Delivery::Duplicate;
    if out.json {
        return out.json(&json!({ "run": key, "wait": args.wait, "duplicate": duplicate }));
    }
    if duplicate {
        writeln!(
            out.out,
            "run {}: wait {} had this signal already; nothing changed",
            shown(key),
            shown(&args.wait)
        )?;
    } else {
        writeln!(
            out.out,
            "run {}: signal {} stored; a worker of its pipeline continues the run when it \
             reaches (or waits at) the wait",
            shown(key),
            shown(&args.wait)
        )?;
    }
    Ok(())
}

/// The payload: the `PAYLOAD` argument, or `--file PATH` (`-` reads
/// standard input), JSON read as a value without types.
fn payload(args: &SignalArgs) -> Result<Value, Failure> {
    let (text, from) = match (&args.payload, &args.file) {
        (Some(text), None) => (text.clone(), "the PAYLOAD argument".to_owned()),
        (None, Some(path)) if path == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| Failure::usage(format_args!("cannot read standard input: {e}")))?;
            (text, "standard input".to_owned())
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format_args!("cannot read the payload file {path:?}: {e}"))
            })?;
            (text, format!("file {path:?}"))
        }
        _ => {
            return Err(Failure::usage(
                "give the signal's payload as JSON after the wait's name ('{...}'), or --file PATH",
            ));
        }
    };
    serde_json::from_str::<Value>(&text)
        .map_err(|e| Failure::usage(format_args!("the payload in {from} is not JSON: {e}")))
}

pub(crate) async fn wake(
    out: &mut Out<'_>,
    store: &dyn CheckpointStore,
    key: &str,
) -> Result<(), Failure> {
    let now = super::store_now(store).await?;
    let woken = wake_run(store, key, now).await?;
    if out.json {
        return out.json(&json!({ "run": key, "wake": true, "step": woken.step, "at_ms": now }));
    }
    writeln!(
        out.out,
        "run {} is due now ({}) at step {}: a worker of its pipeline continues it",
        shown(key),
        when(now),
        shown(&woken.step)
    )?;
    Ok(())
}
