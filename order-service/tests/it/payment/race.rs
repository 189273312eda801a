//! A confirm and the expiry are decided once: confirms from two instances race the expiry
//! loops of both at the due time, and every order ends either `CONFIRMED` with nothing given
//! back or `EXPIRED` with exactly one release, never both.

use std::collections::HashMap;

use order_service::orders::payment::PaymentWindow;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::helpers::config_for;

testkit::on_each_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    confirms_racing_the_expiry_on_two_instances_never_both_confirm_and_give_back
);

const ORDERS: usize = 12;
const CONFIRMS_PER_ORDER: usize = 6;

/// A second instance on `app`'s database, serving until the returned token is dropped.
async fn another_instance(app: &TestApp) -> (String, tokio_util::sync::DropGuard) {
    let mut config = config_for(&app.database, &app.redis_prefix);
    configure(&mut config, 1, Duration::from_millis(20));
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = order_service::build_state(config).await.expect("state");
    let shutdown = CancellationToken::new();
    tokio::spawn(order_service::serve(state, listener, shutdown.clone()));
    (base, shutdown.drop_guard())
}

async fn confirms_racing_the_expiry_on_two_instances_never_both_confirm_and_give_back(
    backend: Backend,
) {
    let app = app_with_window(backend, 1, Duration::from_millis(20)).await;
    let (second, _running) = another_instance(&app).await;
    let mut ids = Vec::new();
    for _ in 0..ORDERS {
        let id = placed(&app).await;
        reserve(&app, &id, PaymentWindow::from_secs(1)).await;
        ids.push(id);
    }
    // Confirms aimed around each order's due time (a third well before it, a third at it, a
    // third just after it), from both instances, while both expiry loops run. The aim uses
    // this machine's clock, the database's too; what is asserted holds whatever the timing.
    let mut confirms = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let due: chrono::DateTime<chrono::Utc> = order(&app, id).await["payment_due_at"]
            .as_str()
            .expect("due")
            .parse()
            .expect("RFC 3339");
        for k in 0..CONFIRMS_PER_ORDER {
            let base = if k % 2 == 0 {
                app.base.clone()
            } else {
                second.clone()
            };
            let (client, id) = (app.client.clone(), id.clone());
            let offset = [-100, -20, 30][n % 3] + 10 * k as i64;
            let at = due + chrono::Duration::milliseconds(offset);
            confirms.push(tokio::spawn(async move {
                let wait = (at - chrono::Utc::now()).to_std().unwrap_or_default();
                tokio::time::sleep(wait).await;
                let response = confirm_at(&client, &base, &id).await;
                (id, response.status().as_u16())
            }));
        }
    }
    let mut answers: HashMap<String, Vec<u16>> = HashMap::new();
    for confirm in confirms {
        let (id, status) = confirm.await.expect("a confirm");
        answers.entry(id).or_default().push(status);
    }
    for id in &ids {
        eventually(Duration::from_secs(30), || async {
            let status = app.order_status(id).await;
            (status != "AWAITING_PAYMENT").then_some(())
        })
        .await;
    }
    let mut outcomes = HashMap::new();
    for id in &ids {
        let order: Value = order(&app, id).await;
        let status = order["status"].as_str().expect("status").to_owned();
        let given_back = releases(&app, id).await;
        let answered = &answers[id];
        assert!(
            answered.iter().all(|s| *s == 200 || *s == 409),
            "{id}: {answered:?}"
        );
        match status.as_str() {
            "CONFIRMED" => {
                assert_eq!(given_back, 0, "{id} confirmed and given back");
                assert!(answered.contains(&200), "{id}: {answered:?}");
            }
            "EXPIRED" => {
                assert_eq!(given_back, 1, "{id} expired: one release");
                assert!(
                    !answered.contains(&200),
                    "{id} expired after a 200: {answered:?}"
                );
            }
            other => panic!("{id} ended {other}"),
        }
        *outcomes.entry(status).or_insert(0) += 1;
    }
    tracing::info!(?outcomes, "confirm and expiry outcomes");
}
