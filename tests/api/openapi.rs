//! `GET /openapi.json`: the API as OpenAPI 3.1, every path the router
//! serves, every error answer with the one error body.

use serde_json::Value;

use crate::common::spawn_app;

const PATHS: [&str; 12] = [
    "/press",
    "/process/{req_id}",
    "/node",
    "/nodes",
    "/events",
    "/sessions/{id}",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/status",
    "/status/history",
];

#[tokio::test]
async fn the_openapi_document_covers_every_path_and_error_answer() {
    let app = spawn_app().await;
    let response = app
        .http
        .get(format!("{}/openapi.json", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let mut documented: Vec<&str> = paths.keys().map(String::as_str).collect();
    documented.sort_unstable();
    let mut expected = PATHS.to_vec();
    expected.sort_unstable();
    assert_eq!(documented, expected);

    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            assert!(responses.contains_key("200"), "{method} {path}");
            for (status, response) in responses {
                if status.as_str() < "400" || path == "/readyz" {
                    continue;
                }
                let schema = &response["content"]["application/json"]["schema"]["$ref"];
                assert_eq!(
                    schema, "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
            let admin = operation["tags"][0] == "admin";
            assert_eq!(
                operation["security"][0].get("admin_token").is_some(),
                admin,
                "{method} {path}: admin operations, and only they, need the token"
            );
            if admin {
                assert!(responses.contains_key("401"), "{method} {path}");
            }
        }
    }
}
