//! OTLP trace export, set up by the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns it on; `OTEL_EXPORTER_OTLP_PROTOCOL` is
//! `http/protobuf` (the specification's default) or `grpc`; `OTEL_SERVICE_NAME` names the
//! service (default: the binary's name). The exporter itself reads the rest
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`, `OTEL_BSP_*`, `OTEL_RESOURCE_ATTRIBUTES`).

use anyhow::{Context, bail};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::config;

/// Where spans go.
#[derive(Debug, Clone)]
pub struct Export {
    /// `service.name` of every span.
    pub service_name: String,
    /// `None`: export is off, and no exporter is built.
    pub protocol: Option<Protocol>,
}

impl Export {
    pub fn from_env(default_service: &str) -> anyhow::Result<Self> {
        let service_name = config::string("OTEL_SERVICE_NAME", default_service);
        let on = config::optional("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || config::optional("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        // Checked even while export is off: a wrong value would only show once it is on.
        let protocol = protocol_from_env()?;
        Ok(Self {
            service_name,
            protocol: on.then_some(protocol),
        })
    }

    /// The tracer provider: with a batching exporter when export is on.
    pub fn provider(&self) -> anyhow::Result<SdkTracerProvider> {
        let resource = Resource::builder()
            .with_service_name(self.service_name.clone())
            .build();
        let builder = SdkTracerProvider::builder().with_resource(resource);
        let exporter = match self.protocol {
            None => return Ok(builder.build()),
            Some(Protocol::Grpc) => SpanExporter::builder().with_tonic().build(),
            Some(protocol) => SpanExporter::builder()
                .with_http()
                .with_protocol(protocol)
                .build(),
        };
        let exporter = exporter.context(
            "environment variable OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) \
             does not give a usable OTLP exporter",
        )?;
        Ok(builder.with_batch_exporter(exporter).build())
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else
/// `http/protobuf`. `http/json` is not built in: refused rather than silently replaced.
fn protocol_from_env() -> anyhow::Result<Protocol> {
    let (name, value) = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|name| config::optional(name).map(|value| (name, value)))
    .unwrap_or(("", "http/protobuf".to_owned()));
    match value.trim() {
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "grpc" => Ok(Protocol::Grpc),
        other => bail!(
            "environment variable {name}={other:?} is not supported: use http/protobuf or grpc"
        ),
    }
}
