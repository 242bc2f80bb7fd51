output "node_urls" {
  description = "HTTPS URL of each node."
  value       = module.picomq.node_urls
}

output "kafka_bootstrap" {
  description = "Kafka bootstrap servers (empty unless Kafka is enabled)."
  value       = module.picomq.kafka_bootstrap
}

output "bucket" {
  description = "Segment bucket."
  value       = module.picomq.bucket
}

output "etcd_endpoints" {
  description = "etcd client endpoints."
  value       = module.picomq.etcd_endpoints
}

output "ca_certificate_pem" {
  description = "CA to verify the nodes' certificates."
  value       = module.picomq.ca_certificate_pem
}

output "auth_tokens_parameter" {
  description = "SSM parameter with the auth tokens."
  value       = module.picomq.auth_tokens_parameter
}

output "admin_token_parameter" {
  description = "SSM parameter with the generated admin token (operations.md, step 5)."
  value       = module.picomq.admin_token_parameter
}
