//! `POST /products/{product_id}/restock`: adds stock, at most once per idempotency key.
//!
//! The key and the response are written in the same transaction as the stock change, so a
//! repeat can never add twice, and it answers the first response's bytes. A refused restock
//! (unknown product, invalid input) stores nothing and does not use up its key.

use anyhow::{Context, anyhow};
use axum::http::StatusCode;
use shared::ids::ProductId;

use super::product::{IdempotencyKey, RestockQuantity};
use super::queries;
use super::restock_queries::{self, StoredRestock};
use crate::error::ApiError;
use crate::replay::StoredResponse;
use crate::state::AppState;

/// A validated restock request.
#[derive(Debug, Clone)]
pub struct Restock {
    pub product_id: ProductId,
    pub quantity: RestockQuantity,
    pub key: Option<IdempotencyKey>,
}

/// Applies the restock, or replays the stored response of its idempotency key.
pub async fn apply(state: &AppState, restock: &Restock) -> Result<StoredResponse, ApiError> {
    let key = restock.key.as_ref().map(IdempotencyKey::as_str);
    if let Some(key) = key {
        let stored = restock_queries::find_by_key(state.db.acquire().await?.conn(), key).await?;
        if let Some(stored) = stored {
            return replay(stored, restock);
        }
    }
    let mut tx = state.db.begin().await?;
    let product = queries::add_stock(tx.conn(), restock.product_id, restock.quantity)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!("product {} does not exist", restock.product_id))
        })?;
    let body = serde_json::to_vec(&product).context("serialising a product")?;
    let quantity = restock.quantity.get();
    if !restock_queries::insert(tx.conn(), restock.product_id, quantity, key, &body).await? {
        // A concurrent first request with the same key committed first: ours adds nothing.
        tx.rollback().await?;
        let stored =
            restock_queries::find_by_key(state.db.acquire().await?.conn(), key.unwrap_or_default())
                .await?
                .ok_or_else(|| anyhow!("a restock key conflicted but its row is missing"))?;
        return replay(stored, restock);
    }
    tx.commit().await?;
    Ok(StoredResponse::first(StatusCode::OK, body))
}

fn replay(stored: StoredRestock, restock: &Restock) -> Result<StoredResponse, ApiError> {
    if stored.product_id != restock.product_id.0 || stored.quantity != restock.quantity.get() {
        return Err(ApiError::KeyReused(
            "this Idempotency-Key was already used for a different restock".to_owned(),
        ));
    }
    Ok(StoredResponse::again(StatusCode::OK, stored.response_body))
}
