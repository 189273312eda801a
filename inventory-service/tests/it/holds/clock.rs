//! A hold's deadline follows the database's clock, the one every confirm, cancel and expiry
//! judges it by: a service host whose clock is off (here the database's runs an hour ahead
//! of it) neither shortens nor lengthens a hold.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use testkit::Backend;
use testkit::skewed_clock::SkewedServer;

use crate::helpers::TestApp;

/// How far the database's clock runs ahead of the host's.
const AHEAD: Duration = Duration::from_secs(3_600);

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_hold_is_stamped_by_the_database_clock_and_lasts_its_ttl_by_it,
);

fn time(hold: &Value, field: &str) -> DateTime<Utc> {
    hold[field]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("{field} in {hold}"))
}

async fn a_hold_is_stamped_by_the_database_clock_and_lasts_its_ttl_by_it(backend: Backend) {
    let server = tokio::task::spawn_blocking(move || SkewedServer::start(backend, AHEAD))
        .await
        .expect("the server starts");
    let url = server.url("inventory_skewed");
    let app = TestApp::spawn_on(backend, move |c| {
        c.database_urls = vec![url];
        // The sweep stays out of the way: the confirm below is the clock's verdict alone.
        c.hold_expiry_interval = Duration::from_secs(60);
    })
    .await;
    app.create_product(1, 10).await;

    let response = app.hold("skewed", &[(1, 2)], Some(120)).await;
    assert_eq!(response.status(), 201);
    let hold: Value = response.json().await.expect("a hold");
    let (created, expires) = (time(&hold, "created_at"), time(&hold, "expires_at"));
    assert_eq!(expires - created, TimeDelta::seconds(120), "{hold}");
    let database_now = tokio::task::block_in_place(|| server.now());
    let host_now = Utc::now();
    assert!(
        (database_now - created).abs() < TimeDelta::seconds(60),
        "stamped {created}: the database's clock reads {database_now}, the host's {host_now}"
    );

    // By the database's clock the hold has most of its two minutes left.
    let confirmed = app.ended_hold("skewed", "confirm").await;
    assert_eq!(confirmed["state"], "CONFIRMED");
    assert_eq!(time(&confirmed, "expires_at"), expires, "{confirmed}");
    assert_eq!(app.stock_and_held(1).await, (8, 0));
}
