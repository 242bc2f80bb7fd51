// The usage example of docs/sdk-rust.md, unchanged except that the node's
// URL comes from the first argument or PICOMQ_URL (default
// http://127.0.0.1:4437, what `make run` serves). CI runs it against a real
// node (e2e/rust_client_test.go).
use picomq_client::{connect, Live, Protocol, ReadLimits};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PICOMQ_URL").ok())
        .unwrap_or_else(|| "http://127.0.0.1:4437".to_string());

    let client = connect(Protocol::Pico, &url)?;
    client.create("/orders/1042", "application/json", None).await?;
    let ack = client
        .append("/orders/1042", &[r#"{"item":"widget"}"#.into()], "application/json")
        .await?;
    println!("appended at {}", ack.start);

    let page = client
        .read("/orders/1042", &client.beginning(), Live::Off, ReadLimits::server_default())
        .await?;
    for record in &page.records {
        println!("{} {}", record.position, record.body_text());
    }
    Ok(())
}
