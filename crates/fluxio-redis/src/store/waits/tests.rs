//! The mailbox's entries read back, and the Lua `decide` (which `TAKE`
//! runs) against `fluxio_core::store::decide` on the same mailboxes.

use fluxio_core::store::{Decision, Payload, Signal, SignalState, Take, decide};
use fluxio_test_support as support;

use super::{decision, decode_entry, encode_entry};
use crate::scripts;

/// A small deterministic generator (xorshift64*): the same cases on every
/// run, no dependency.
struct Cases(u64);

impl Cases {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NAMES: [&str; 4] = ["ok", "no", "wait with spaces", "ünïcode"];

/// A mailbox of distinct names in random states, sent at close times (so
/// that ties are decided by send order).
fn mailbox(cases: &mut Cases) -> Vec<Signal> {
    let mut out: Vec<Signal> = Vec::new();
    for name in NAMES {
        if cases.below(3) == 0 {
            continue;
        }
        let at = 1_700_000_000_000 + cases.below(3);
        let signal = match cases.below(4) {
            0 => Signal::closed(name, at),
            state => {
                let payload = Payload::new(&(name, cases.below(3))).expect("encodes");
                let mut s = Signal::new(name, payload, ["", "ops", "a b\nc"][state as usize - 1])
                    .expect("a name")
                    .at(at);
                if state == 3 {
                    s.state = SignalState::Consumed;
                }
                s
            }
        };
        out.push(signal);
    }
    // send order is not name order
    let shift = (cases.below(out.len() as u64 + 1) as usize).min(out.len());
    out.rotate_left(shift);
    out
}

fn take(cases: &mut Cases) -> Take {
    let waits: Vec<String> = NAMES
        .iter()
        .filter(|_| cases.below(2) == 0)
        .map(|n| (*n).to_owned())
        .collect();
    let refuse = match cases.below(3) {
        0 => Some(NAMES[cases.below(4) as usize].to_owned()),
        _ => None,
    };
    Take::new(waits, cases.below(2) == 0, refuse)
}

#[test]
fn mailbox_entries_read_back_whole() {
    let mut cases = Cases(7);
    for _ in 0..200 {
        for (order, signal) in (1u64..).zip(mailbox(&mut cases)) {
            let entry = encode_entry(order, &signal);
            let (back_order, back) = decode_entry("p/r", &signal.name, &entry).expect("reads");
            assert_eq!((back_order, &back), (order, &signal));
        }
    }
    for bad in [
        &b""[..],
        b"1 delivered 5",
        b"x delivered 1 0\n",
        b"1 lost 1 0\n\x00",
        b"1 closed 1 9\nab",
    ] {
        assert!(
            matches!(
                decode_entry("p/r", "ok", bad),
                Err(fluxio_core::Error::CorruptCheckpoint { .. })
            ),
            "{bad:?}"
        );
    }
}

/// The Lua port of `decide` decides as the Rust does, and leaves the same
/// mailbox, on 2,000 generated mailboxes and waits.
#[tokio::test]
async fn the_lua_decide_is_the_rust_decide() {
    let Some((mut raw, prefix)) = support::redis::raw_in("lua_decide").await else {
        return;
    };
    let unit = Signal::closed("-", 0).payload;
    let mut cases = Cases(0x9e37_79b9_7f4a_7c15);
    let key = format!("{prefix}.signals:p/r");
    let mut seen = [0u32; 3];
    for case in 0..2_000 {
        let mut rust = mailbox(&mut cases);
        let take = take(&mut cases);
        let now = 1_700_000_000_000 + cases.below(10);
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .expect("DEL");
        if !rust.is_empty() {
            let mut hset = redis::cmd("HSET");
            hset.arg(&key).arg("").arg(rust.len());
            for (order, s) in (1u64..).zip(&rust) {
                hset.arg(&s.name).arg(encode_entry(order, s));
            }
            let _: () = hset.query_async(&mut raw).await.expect("HSET");
        }
        let before = rust.clone();
        let take = take.at(now);
        let expected = decide(&mut rust, &take);

        let lua = redis::Script::new(scripts::DECIDE);
        let mut script = lua.prepare_invoke();
        script
            .key(&key)
            .arg(now)
            .arg(u8::from(take.expired))
            .arg(take.refuse.as_deref().unwrap_or_default())
            .arg(unit.bytes());
        for name in &take.waits {
            script.arg(name);
        }
        let reply: Vec<Vec<u8>> = script.invoke_async(&mut raw).await.expect("DECIDE");
        let got = decision("p/r", &reply)
            .expect("a decision")
            .expect("not refused");
        let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .expect("HGETALL");
        let mut lua: Vec<(u64, Signal)> = fields
            .iter()
            .filter(|(name, _)| !name.is_empty())
            .map(|(name, entry)| decode_entry("p/r", name, entry).expect("reads"))
            .collect();
        lua.sort_by_key(|(order, _)| *order);
        let lua: Vec<Signal> = lua.into_iter().map(|(_, s)| s).collect();
        let why = format!("case {case}: {before:#?} {take:?} at {now}");
        assert_eq!(got, expected, "{why}");
        assert_eq!(lua, rust, "{why}");
        seen[match got {
            Decision::Open => 0,
            Decision::Signal(_) => 1,
            _ => 2,
        }] += 1;
    }
    assert!(
        seen.iter().all(|n| *n > 100),
        "every decision is tried: {seen:?}"
    );
    support::redis::cleanup(&mut raw, &prefix).await;
}
