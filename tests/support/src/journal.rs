//! What the stores' run-journal benches and tests share: a crashed run
//! whose context holds 1 MB, and the first checkpoint of its resume.

use fluxio_core::Context;
use fluxio_core::store::{Change, Checkpoint};

/// The key of the crashed run.
pub const KEY: &str = "bench/crashed";

/// The whole context's size.
pub const MB: usize = 1 << 20;

/// The journal of a 10-stage run that crashed in its sixth stage: a whole
/// checkpoint 0 holding a 1 MB value, then a delta per stage that set one
/// small key (checkpoints 1 to 5). Oldest first.
#[must_use]
pub fn crashed_run() -> Vec<Checkpoint> {
    let mut ctx = Context::new()
        .set("blob", vec![7u8; MB])
        .expect("1 MB serializes");
    let mut journal = Vec::new();
    for seq in 0..6u32 {
        let before = ctx.clone();
        if seq > 0 {
            ctx = ctx
                .set(format!("stage-{seq}"), u64::from(seq))
                .expect("a number serializes");
        }
        let mut cp = Checkpoint::new("crashed", "0123456789ab", 3 * seq, "stage", ctx.snapshot())
            .in_pipeline("bench");
        cp.seq = seq;
        if seq > 0 {
            cp.change = Change::between(&before.snapshot(), &ctx.snapshot());
        }
        journal.push(cp);
    }
    journal
}

/// The first checkpoint a resume of `latest` writes: the next one, the
/// same context (an empty delta), one more attempt.
#[must_use]
pub fn resumed(latest: &Checkpoint) -> Checkpoint {
    let mut next = latest.clone();
    next.earlier.clear();
    next.seq += 1;
    next.change = Change::none();
    next.attempt += 1;
    next
}
