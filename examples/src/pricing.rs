//! Pricing with helpers (rule 34): `price` calls `with_tax`, which calls
//! `vat_rate`; both are `#[helper]`s declared with `uses`, so an edit of
//! either changes this pipeline's pinned version in `pipeline-versions.txt`.

use fluxio::{Context, PipelineBuilder, StageResult, helper, pipeline, stage};

/// The VAT rate, in percent.
#[helper]
pub fn vat_rate() -> u64 {
    21
}

/// A net price in cents with VAT added, rounded down.
#[helper(uses = [vat_rate])]
pub fn with_tax(net_cents: u64) -> u64 {
    net_cents + net_cents * vat_rate() / 100
}

/// Prices the order: `total_cents` from `net_cents`.
#[stage(uses = [with_tax])]
pub async fn price(ctx: Context) -> StageResult {
    let net: u64 = ctx.get("net_cents")?;
    Ok(ctx.set("total_cents", with_tax(net))?)
}

/// The pricing pipeline.
pub fn pipeline() -> PipelineBuilder {
    pipeline![price].name("pricing")
}
