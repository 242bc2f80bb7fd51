output "node_urls" {
  description = "HTTPS URL of each PicoMQ node (its advertise URL)."
  value       = [for eni in aws_network_interface.node : "https://${eni.private_ip}:${var.http_port}"]
}

output "node_instance_ids" {
  description = "EC2 instance ids of the nodes, in node order (for drains and rolling upgrades)."
  value       = aws_instance.node[*].id
}

output "kafka_bootstrap" {
  description = "Kafka bootstrap servers (host:port,...), empty when kafka_enabled is false."
  value       = var.kafka_enabled ? join(",", [for eni in aws_network_interface.node : "${eni.private_ip}:${var.kafka_port}"]) : ""
}

output "bucket" {
  description = "The regional S3 bucket for segments."
  value       = aws_s3_bucket.segments.id
}

output "object_store_url" {
  description = "The --object-store URL the nodes use."
  value       = local.object_store_url
}

output "etcd_endpoints" {
  description = "etcd client endpoints (mutual TLS)."
  value       = local.etcd_endpoints
}

output "etcd_instance_ids" {
  description = "EC2 instance ids of the etcd members."
  value       = aws_instance.etcd[*].id
}

output "ca_certificate_pem" {
  description = "The cluster CA: clients verify the nodes' certificates with it."
  value       = tls_self_signed_cert.ca.cert_pem
}

output "auth_tokens_parameter" {
  description = "SSM parameter holding the token file the nodes load (hashes only)."
  value       = local.auth_tokens_parameter
}

output "admin_token_parameter" {
  description = "SSM parameter holding the generated admin token (empty when auth_tokens_parameter was given)."
  value       = var.auth_tokens_parameter == "" ? aws_ssm_parameter.admin_token[0].name : ""
}

output "node_security_group_id" {
  description = "Security group of the nodes."
  value       = aws_security_group.nodes.id
}
