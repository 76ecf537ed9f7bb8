//! Streaming: a stage emits tokens while it runs; the caller reads them as
//! they come, then gets the final context, where the tokens are also stored
//! as `<stage>_stream_result`.
//!
//! ```text
//! cargo run --example streaming
//! ```

use std::time::Duration;

use fluxio::{Context, Emitter, InMemoryStore, StageResult, StreamEvent, ctx, pipeline, stage};

/// Splits the prompt into words and emits them one by one, like a model
/// producing tokens.
#[stage]
async fn generate(ctx: Context, out: Emitter) -> StageResult {
    let prompt: String = ctx.get("prompt")?;
    for word in prompt.split_whitespace() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // waits while the consumer's buffer is full; fails if it went away
        out.emit(word.to_uppercase()).await?;
    }
    Ok(ctx)
}

/// Runs after the stream stage, on its collected chunks.
#[stage]
async fn summarize(ctx: Context) -> StageResult {
    let words: Vec<String> = ctx.get("generate_stream_result")?;
    Ok(ctx.set("summary", format!("{} words", words.len()))?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let pipeline = pipeline![generate, summarize]
        .name("summaries")
        .store(InMemoryStore::new())
        .stream_buffer(4)
        .build()?;

    let mut stream = pipeline.stream(
        "stream-1",
        ctx! { "prompt" => "durable pipelines can stream too" }?,
    );
    while let Some(event) = stream.recv().await {
        match event? {
            StreamEvent::Chunk(chunk) => println!("{}: {}", chunk.stage, chunk.value),
            StreamEvent::Done(ctx) => {
                println!("done: {}", ctx.get::<String>("summary")?);
            }
            other => println!("{other:?}"),
        }
    }
    Ok(())
}
