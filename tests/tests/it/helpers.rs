//! docs/CONTRACT.md rule 34, helpers count: a stage that declares the
//! functions it calls (`uses = [...]`) has their code in its hash, so the
//! same stage over an edited helper is another version, over a helper whose
//! comments and layout changed the same one. Each module below stamps the
//! identical stage (one `macro_rules!`, so its own tokens are equal) beside
//! its own `tax` helper.

use fluxio::{Context, InMemoryStore, Pipeline, StageResult, pipeline};

/// The stage `price`, the same tokens in every module, calling that
/// module's `tax`; and the module's pipeline of it.
macro_rules! priced {
    () => {
        #[fluxio::stage(uses = [tax])]
        async fn price(ctx: Context) -> StageResult {
            let net: u64 = ctx.get("net")?;
            Ok(ctx.set("total", net + tax(net))?)
        }

        pub(crate) fn pipeline() -> Pipeline {
            pipeline![price]
                .name("priced")
                .store(InMemoryStore::new())
                .build()
                .expect("the pipeline builds")
        }
    };
}

mod base {
    use super::*;

    #[fluxio::helper]
    fn tax(cents: u64) -> u64 {
        cents * 21 / 100
    }

    priced!();
}

mod comments_edited {
    use super::*;

    /// VAT, in cents, rounded down.
    #[fluxio::helper]
    fn tax(cents: u64, // the net price
    ) -> u64 {
        // 21% in the Netherlands
        cents * 21 / 100
    }

    priced!();
}

mod code_edited {
    use super::*;

    #[fluxio::helper]
    fn tax(cents: u64) -> u64 {
        cents * 20 / 100
    }

    priced!();
}

/// A helper of the helper: `tax` declares `rate`, and an edit of `rate`
/// reaches the stage's version through it.
mod nested {
    pub(super) mod a {
        use super::super::*;

        #[fluxio::helper]
        fn rate() -> u64 {
            21
        }

        #[fluxio::helper(uses = [rate])]
        fn tax(cents: u64) -> u64 {
            cents * rate() / 100
        }

        priced!();
    }

    pub(super) mod b {
        use super::super::*;

        #[fluxio::helper]
        fn rate() -> u64 {
            20
        }

        #[fluxio::helper(uses = [rate])]
        fn tax(cents: u64) -> u64 {
            cents * rate() / 100
        }

        priced!();
    }
}

/// A stage is a helper too: `tax` here is itself a stage's function.
mod stage_as_helper {
    use super::*;

    #[fluxio::stage]
    async fn audit(ctx: Context) -> StageResult {
        Ok(ctx.set("audited", true)?)
    }

    #[fluxio::stage(uses = [audit])]
    async fn checked(ctx: Context) -> StageResult {
        audit(ctx).await
    }

    pub(super) fn pipeline() -> Pipeline {
        pipeline![checked]
            .name("checked")
            .store(InMemoryStore::new())
            .build()
            .expect("the pipeline builds")
    }
}

#[test]
fn rule34_editing_a_helper_changes_the_version_editing_its_comments_does_not() {
    let base = base::pipeline();
    assert_eq!(
        base.version(),
        comments_edited::pipeline().version(),
        "comments, doc comments and layout of a helper are not its code"
    );
    assert_ne!(
        base.version(),
        code_edited::pipeline().version(),
        "the helper's code counts in the stage's hash"
    );
}

#[test]
fn rule34_a_helpers_helper_counts_too() {
    assert_ne!(
        nested::a::pipeline().version(),
        nested::b::pipeline().version()
    );
    assert_ne!(nested::a::pipeline().version(), base::pipeline().version());
}

#[test]
fn rule34_a_stage_can_be_named_as_a_helper() {
    let p = stage_as_helper::pipeline();
    assert_eq!(p.version().len(), 12);
}

#[tokio::test]
async fn rule34_a_stage_with_helpers_runs_as_written() {
    let input = Context::new().set("net", 1_000u64).expect("set");
    let out = base::pipeline()
        .invoke("rule34-run", input.clone())
        .await
        .expect("runs");
    assert_eq!(out.context().get::<u64>("total").expect("total"), 1_210);
    let out = code_edited::pipeline()
        .invoke("rule34-run", input)
        .await
        .expect("runs");
    assert_eq!(out.context().get::<u64>("total").expect("total"), 1_200);
}
