//! The consumer loop's store on MySQL / MariaDB: [`ConsumerStore`] over
//! `platform_mysql::inbox`.

use std::collections::HashMap;

use platform_mysql::inbox;
use uuid::Uuid;

use super::MySqlStore;
use crate::messaging::consumer::ConsumerStore;

impl ConsumerStore for MySqlStore {
    async fn count_failures(&self, failed: &[(Uuid, String)]) -> sqlx::Result<HashMap<Uuid, i32>> {
        // `count_failures` counts an id given twice once, itself.
        let failed: Vec<(Uuid, &str)> = failed
            .iter()
            .map(|(id, error)| (*id, error.as_str()))
            .collect();
        Ok(inbox::count_failures(&self.0, &failed)
            .await?
            .into_iter()
            .collect())
    }

    async fn answers(&self) -> bool {
        inbox::answers(&self.0).await
    }
}
