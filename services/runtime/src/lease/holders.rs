//! Reading who holds each lease, for operators (`fairshare leases`).

use async_nats::jetstream::{self, kv};

use super::{BucketError, LEASE_BUCKET};

/// One lease as [`holders`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// `<role>.<cluster>`.
    pub key: String,
    /// The instance that holds it.
    pub holder: String,
    /// When the holder last wrote it (the server's time), Unix ms.
    pub written_ms: i64,
}

/// Every lease held now (values not yet dropped), by key; `None` when the bucket does not
/// exist (no decision or preemption service has started against this server).
pub async fn holders(js: &jetstream::Context) -> Result<Option<Vec<Holding>>, BucketError> {
    use futures::TryStreamExt;
    // Told apart from a bucket that cannot be read: is its stream there at all?
    if let Err(e) = js.get_stream(format!("KV_{LEASE_BUCKET}")).await {
        return match crate::missing::missing(&e) {
            Some(crate::missing::Missing::Stream) => Ok(None),
            _ => Err(BucketError::Open(crate::missing::describe(&e))),
        };
    }
    let store = js
        .get_key_value(LEASE_BUCKET)
        .await
        .map_err(|e| BucketError::Open(e.to_string()))?;
    let mut keys: Vec<String> = store
        .keys()
        .await
        .map_err(|e| BucketError::Open(e.to_string()))?
        .try_collect()
        .await
        .map_err(|e| BucketError::Open(e.to_string()))?;
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        match store.entry(key.clone()).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put => out.push(Holding {
                key,
                holder: String::from_utf8_lossy(&entry.value).into_owned(),
                written_ms: i64::try_from(entry.created.unix_timestamp_nanos() / 1_000_000)
                    .unwrap_or(0),
            }),
            Ok(_) => {}
            Err(e) => return Err(BucketError::Open(e.to_string())),
        }
    }
    Ok(Some(out))
}
