//! The API as OpenAPI 3.1, built from the handlers' types and annotations
//! and served at `GET /openapi.json`.

use axum::Json;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::OpenApi;

use super::error::ErrorBody;
use super::{health, nodes, press, process, sessions, status};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "nodes-control",
        description = "A sticky-session balancer: presses of a session always reach its node."
    ),
    paths(
        press::press,
        process::process,
        nodes::node_command,
        nodes::list,
        nodes::events,
        sessions::show,
        health::healthz,
        health::readyz,
        health::metrics,
        openapi_json,
        status::page,
        status::history,
    ),
    components(schemas(ErrorBody)),
    modifiers(&AdminToken),
    tags(
        (name = "sessions", description = "The traffic: presses and stateless requests"),
        (name = "admin", description = "Membership and inspection, behind `Authorization: Bearer $ADMIN_TOKEN`"),
        (name = "operations", description = "Probes, metrics, the status page and this document"),
    )
)]
pub struct ApiDoc;

/// The `admin_token` scheme the admin operations name.
struct AdminToken;

impl utoipa::Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json", body = Object)))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
