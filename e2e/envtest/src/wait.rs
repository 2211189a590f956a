//! Waiting in tests for what a control plane does in its own time: poll until a check gives a
//! value, with a deadline that names what was awaited.

use std::time::{Duration, Instant};

use anyhow::bail;

/// Polls `check` until it returns `Some`; after `secs` seconds an error naming `what`.
pub async fn eventually_result<T, F, Fut>(secs: u64, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` until it returns `Some`, failing after `secs` seconds with `what`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_result(secs, what, check).await.unwrap_or_else(|e| panic!("{e}"))
}
