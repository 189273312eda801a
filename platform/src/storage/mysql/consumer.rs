//! The consumer loop's store on MySQL / MariaDB: [`ConsumerStore`] over
//! `platform_mysql::inbox`.

use std::collections::HashMap;

use platform_mysql::inbox;
use uuid::Uuid;

use super::MySqlStore;
use crate::messaging::consumer::{ConsumerStore, first_of_each};

impl ConsumerStore for MySqlStore {
    async fn count_failures(&self, failed: &[(Uuid, String)]) -> sqlx::Result<HashMap<Uuid, i32>> {
        let unique = first_of_each(failed);
        if unique.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(inbox::count_failures(&self.0, &unique)
            .await?
            .into_iter()
            .collect())
    }

    async fn answers(&self) -> bool {
        inbox::answers(&self.0).await
    }
}
