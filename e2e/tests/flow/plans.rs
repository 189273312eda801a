//! The plans of the sessions that plan each statement once, for any values
//! (`platform::storage::postgres::planned_once`, decision 0063): order intake's, each
//! leader's of `POST /deductions` batches, and both consumers' (inventory's reservations,
//! order-service's settling). A plan made on an empty table stays in use as the
//! table grows, so it must read the tables by their indexes, never by scanning them whole:
//! each statement those sessions run, as the workspace checks it at build time (the query data
//! in `.sqlx/`), is prepared here on a fresh, empty database with their settings, and its plan
//! is read back with `EXPLAIN EXECUTE`.
//!
//! The other sessions plan each statement for its values; run over every statement of both
//! services, the same check finds generic plans that read `outbox` through a whole index
//! (the backlog gauge, where that is the point, and statements run rarely), which is why
//! planning once stays with these busy writers.

use std::collections::HashMap;

use serde_json::Value;
use testkit::TestDatabase;

/// A statement of the query data: its file, text and number of parameters.
struct Checked {
    file: String,
    query: String,
    parameters: usize,
}

/// The statements the intake's session runs: the batch's insert, and the lookup of stored
/// outcomes by token.
fn intake_statement(query: &str) -> bool {
    query.contains("INSERT INTO orders") || query.contains("FROM idempotency_keys WHERE token")
}

/// The statements a deductions leader's session runs: the batch's read (stock and stored
/// outcomes) and its write.
fn deductions_statement(query: &str) -> bool {
    let read = query.contains(r#"AS "kind!""#) && query.contains("FROM deductions AS d");
    read || query.contains(r#"AS "recorded!""#)
}

/// The statements order-service's consumer of inventory's events runs: the settling batch's
/// read and its write.
fn settling_statement(query: &str) -> bool {
    query.contains(r#"AS "seen!""#) || (query.contains("moved AS") && query.contains("ordered"))
}

/// The statements inventory's consumer of order events runs: the batch's read and its write.
fn reservations_statement(query: &str) -> bool {
    let read = query.contains(r#"AS "kind!""#) && query.contains("FROM reservations");
    read || query.contains("ON CONFLICT ON CONSTRAINT reservations_pkey")
}

fn checked_statements(runs_there: fn(&str) -> bool) -> Vec<Checked> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.sqlx");
    let mut statements: Vec<Checked> = std::fs::read_dir(&dir)
        .expect("the query data")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let data: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("a query file"))
                    .expect("JSON");
            let postgres = data["db_name"] == "PostgreSQL";
            let parameters = data["describe"]["parameters"]["Left"]
                .as_array()
                .map_or(0, Vec::len);
            let checked = Checked {
                file: path.file_name().expect("a name").to_string_lossy().into(),
                query: data["query"].as_str().expect("the query's text").to_owned(),
                parameters,
            };
            (postgres, checked)
        })
        // MySQL's statements (the stores/*-mysql crates) plan nothing once: PostgreSQL's only.
        .filter(|(postgres, checked)| *postgres && runs_there(&checked.query))
        .map(|(_, checked)| checked)
        .collect();
    statements.sort_by(|a, b| a.file.cmp(&b.file));
    statements
}

/// The tables a plan reads whole: sequential scans, index scans with no condition on the
/// index and no `LIMIT` above them to stop them early, and index scans whose condition is not
/// on the index's first column (a B-tree then walks all of it; on an empty table, one search
/// per value of an `= ANY` through the key looks dearer than that one walk). `leading` maps
/// each index to its first column.
fn whole_table_reads(
    plan: &Value,
    limited: bool,
    leading: &HashMap<String, String>,
) -> Vec<String> {
    let kind = plan["Node Type"].as_str().unwrap_or_default();
    let limited = limited || kind == "Limit";
    let mut found = Vec::new();
    let relation = plan["Relation Name"].as_str().unwrap_or_default();
    let index = plan["Index Name"].as_str().unwrap_or_default();
    match (kind, plan["Index Cond"].as_str()) {
        ("Seq Scan", _) => found.push(format!("Seq Scan on {relation}")),
        ("Index Scan" | "Index Only Scan" | "Bitmap Index Scan", None) if !limited => {
            found.push(format!("{kind} on {relation} with no condition"));
        }
        ("Index Scan" | "Index Only Scan" | "Bitmap Index Scan", Some(condition)) => {
            let first = leading.get(index).map_or("", String::as_str);
            if !mentions(condition, first) {
                found.push(format!(
                    "{kind} on {relation} through {index}, whose first column {first} is not in {condition}"
                ));
            }
        }
        _ => {}
    }
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            found.extend(whole_table_reads(child, limited, leading));
        }
    }
    found
}

/// Whether `condition` names `column` as a whole word.
fn mentions(condition: &str, column: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    !column.is_empty()
        && condition.match_indices(column).any(|(at, _)| {
            let before = condition[..at].chars().next_back();
            let after = condition[at + column.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
}

/// Each index of `db` with its first column (none for an index on an expression).
async fn leading_columns(conn: &mut sqlx::PgConnection) -> HashMap<String, String> {
    sqlx::query_as(
        "SELECT c.relname::text, a.attname::text FROM pg_index AS i
           JOIN pg_class AS c ON c.oid = i.indexrelid
           JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]",
    )
    .fetch_all(conn)
    .await
    .expect("the indexes")
    .into_iter()
    .collect()
}

#[tokio::test]
async fn the_intakes_statements_planned_once_on_empty_tables_read_them_by_index() {
    let orders = TestDatabase::create("plans_orders", &order_service::MIGRATOR).await;
    let statements = checked_statements(intake_statement);
    assert_eq!(statements.len(), 2, "the insert and the lookup by token");
    assert_read_by_index(&orders, "orders, idempotency_keys, outbox", &statements).await;
}

#[tokio::test]
async fn a_deductions_leaders_statements_planned_once_on_empty_tables_read_them_by_index() {
    let stock = TestDatabase::create("plans_stock", &inventory_service::MIGRATOR).await;
    let statements = checked_statements(deductions_statement);
    assert_eq!(statements.len(), 2, "the batch's read and its write");
    assert_read_by_index(
        &stock,
        "products, deductions, holds, held_units",
        &statements,
    )
    .await;
}

#[tokio::test]
async fn the_settling_consumers_statements_planned_once_on_empty_tables_read_them_by_index() {
    let orders = TestDatabase::create("plans_settling", &order_service::MIGRATOR).await;
    let statements = checked_statements(settling_statement);
    assert_eq!(statements.len(), 2, "the batch's read and its write");
    assert_read_by_index(&orders, "orders, processed_messages, outbox", &statements).await;
}

#[tokio::test]
async fn the_reservations_consumers_statements_planned_once_on_empty_tables_read_them_by_index() {
    let stock = TestDatabase::create("plans_reservations", &inventory_service::MIGRATOR).await;
    let statements = checked_statements(reservations_statement);
    assert_eq!(statements.len(), 2, "the batch's read and its write");
    assert_read_by_index(
        &stock,
        "products, reservations, processed_messages, outbox",
        &statements,
    )
    .await;
}

/// Prepares each of `statements` on `db` with the settings of a session that plans once,
/// after `tables` were analysed empty, and fails on any plan that reads a table whole.
async fn assert_read_by_index(db: &TestDatabase, tables: &str, statements: &[Checked]) {
    let mut conn = db.pool.acquire().await.expect("a pooled connection");
    conn.close_on_drop();
    // Statistics that say the tables are empty, as the first ANALYZE of a new database
    // leaves them: the planner then finds a scan of the whole table cheapest.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ANALYZE {tables}")))
        .execute(&mut *conn)
        .await
        .expect("analyze");
    sqlx::raw_sql(platform::storage::postgres::planned_once::SETTINGS)
        .execute(&mut *conn)
        .await
        .expect("the session's settings");
    let leading = leading_columns(&mut conn).await;
    let mut whole = Vec::new();
    for statement in statements {
        let prepare = format!("PREPARE plan_check AS {}", statement.query);
        sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", statement.file));
        let values = vec!["NULL"; statement.parameters].join(", ");
        let explain = format!("EXPLAIN (FORMAT JSON) EXECUTE plan_check({values})");
        let plan: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .fetch_one(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", statement.file));
        sqlx::raw_sql("DEALLOCATE plan_check")
            .execute(&mut *conn)
            .await
            .expect("deallocate");
        let root = &plan[0]["Plan"];
        assert!(root["Node Type"].is_string(), "{}: a plan", statement.file);
        for read in whole_table_reads(root, false, &leading) {
            whole.push(format!("{}: {read}", statement.file));
        }
    }
    assert!(
        whole.is_empty(),
        "plans made once that read a table whole:\n{}",
        whole.join("\n")
    );
}
