//! Read-only stores in the catalog: creating, describing, listing and dropping them.
//!
//! A store is built offline into chunk files for the nodes of its ring (see
//! [`cairn_readonly`]); the master keeps its columns, its ring and which tablet
//! server is each node. [`Client::get_store`] returns that entry, so a build can
//! lay its files out for the servers that will hold them.

use cairn_proto::{
    CreateStoreRequest, DropStoreRequest, GetStoreRequest, ListStoresRequest, PushStoreRequest,
    RollbackStoreRequest, RollbackStoreResponse,
};
use cairn_readonly::StoreSchema;
pub use cairn_readonly::{PushReport, StoreEntry, StoreNode};
use serde::Deserialize;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::retry::request;

/// What [`Client::create_store`] creates. Zeros take the master's defaults: four
/// ring partitions per live tablet server, one copy of every key, one chunk file per
/// partition, two versions kept.
#[derive(Clone, Debug)]
pub struct CreateStoreSpec {
    /// Name.
    pub name: String,
    /// Key and value columns.
    pub schema: StoreSchema,
    /// Ring partitions.
    pub partitions: u32,
    /// Copies of every key, on distinct tablet servers.
    pub replication: u32,
    /// Chunk files per partition and replica.
    pub chunks: u32,
    /// Versions kept for rollback.
    pub retained: u32,
    /// Succeed (returning the existing store's id) if a store of that name exists.
    pub if_not_exists: bool,
}

impl CreateStoreSpec {
    /// A store with the master's defaults.
    pub fn new(name: impl Into<String>, schema: StoreSchema) -> Self {
        CreateStoreSpec {
            name: name.into(),
            schema,
            partitions: 0,
            replication: 0,
            chunks: 0,
            retained: 0,
            if_not_exists: false,
        }
    }
}

fn decode<T: for<'de> Deserialize<'de>>(what: &str, b: &[u8]) -> Result<T> {
    serde_json::from_slice(b)
        .map_err(|e| ClientError::Internal(format!("the master sent a malformed {what}: {e}")))
}

impl Client {
    /// Creates a read-only store and lays its ring out over the live tablet servers.
    /// Returns its id. Needs administrative rights.
    pub async fn create_store(&self, spec: CreateStoreSpec) -> Result<String> {
        let req = CreateStoreRequest {
            name: spec.name.clone(),
            schema_json: serde_json::to_vec(&spec.schema)
                .map_err(|e| ClientError::InvalidArgument(format!("store schema: {e}")))?
                .into(),
            partitions: spec.partitions,
            replication: spec.replication,
            chunks: spec.chunks,
            retained: spec.retained,
            if_not_exists: spec.if_not_exists,
        };
        let resp = self
            .call_master(
                &format!("creating store '{}'", spec.name),
                move |mut m, t| {
                    let r = request(req.clone(), t);
                    async move { m.create_store(r).await }
                },
            )
            .await?;
        Ok(resp.store_id)
    }

    /// Drops a read-only store from the catalog. Needs administrative rights.
    pub async fn drop_store(&self, name: &str, if_exists: bool) -> Result<()> {
        let req = DropStoreRequest {
            name: name.to_string(),
            if_exists,
        };
        self.call_master(&format!("dropping store '{name}'"), move |mut m, t| {
            let r = request(req.clone(), t);
            async move { m.drop_store(r).await }
        })
        .await?;
        Ok(())
    }

    /// A read-only store's catalog entry.
    pub async fn get_store(&self, name: &str) -> Result<StoreEntry> {
        Ok(self.get_store_and_push(name).await?.0)
    }

    /// A read-only store's catalog entry and the report of its last push the leader
    /// master drove (`None` if it drove none, e.g. since it became leader).
    pub async fn get_store_and_push(&self, name: &str) -> Result<(StoreEntry, Option<PushReport>)> {
        let req = GetStoreRequest {
            name: name.to_string(),
        };
        let resp = self
            .call_master(&format!("describing store '{name}'"), move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.get_store(r).await }
            })
            .await?;
        let push = if resp.push_json.is_empty() {
            None
        } else {
            Some(decode("push report", &resp.push_json)?)
        };
        Ok((decode("store", &resp.store_json)?, push))
    }

    /// Starts pushing a built version of a read-only store: every tablet server of its
    /// ring fetches its `node-<n>` folder of `source` (a folder they can all read), then
    /// all swap together. Returns the version; follow the push with
    /// [`Client::get_store_and_push`]. `version` 0 takes the next number;
    /// `throttle_bytes_per_sec` 0 fetches at full speed. Needs administrative rights.
    pub async fn push_store(
        &self,
        name: &str,
        source: &str,
        version: u64,
        throttle_bytes_per_sec: u64,
    ) -> Result<u64> {
        let req = PushStoreRequest {
            name: name.to_string(),
            source: source.to_string(),
            version,
            throttle_bytes_per_sec,
            rebalance: false,
        };
        let resp = self
            .call_master(&format!("pushing store '{name}'"), move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.push_store(r).await }
            })
            .await?;
        Ok(resp.version)
    }

    /// Starts rebalancing a read-only store: the live tablet servers not on its ring
    /// join it and take their share of the partitions, copied from the servers that
    /// hold them, while every lookup keeps being answered. Like a push, it makes a
    /// new version (returned); follow it with [`Client::get_store_and_push`]. Needs
    /// administrative rights.
    pub async fn rebalance_store(&self, name: &str, throttle_bytes_per_sec: u64) -> Result<u64> {
        let req = PushStoreRequest {
            name: name.to_string(),
            throttle_bytes_per_sec,
            rebalance: true,
            ..Default::default()
        };
        let resp = self
            .call_master(&format!("rebalancing store '{name}'"), move |mut m, t| {
                let r = request(req.clone(), t);
                async move { m.push_store(r).await }
            })
            .await?;
        Ok(resp.version)
    }

    /// Makes an earlier retained version of a read-only store live on every server:
    /// `to`, or (0) the newest one older than the current. Needs administrative
    /// rights.
    pub async fn rollback_store(&self, name: &str, to: u64) -> Result<RollbackStoreResponse> {
        let req = RollbackStoreRequest {
            name: name.to_string(),
            to,
        };
        self.call_master(&format!("rolling back store '{name}'"), move |mut m, t| {
            let r = request(req.clone(), t);
            async move { m.rollback_store(r).await }
        })
        .await
    }

    /// Every read-only store, by name.
    pub async fn list_stores(&self) -> Result<Vec<StoreEntry>> {
        let resp = self
            .call_master("listing stores", |mut m, t| async move {
                m.list_stores(request(ListStoresRequest {}, t)).await
            })
            .await?;
        let mut stores: Vec<StoreEntry> = decode("store list", &resp.stores_json)?;
        stores.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(stores)
    }
}
