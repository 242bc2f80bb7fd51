# The cluster's private CA and every certificate, issued by the tls
# provider, and the auth tokens. Private keys and the token end up in the
# Terraform state (keep the state encrypted and access-controlled) and in
# SSM Parameter Store as SecureString parameters, from which each instance
# fetches only its own, at boot and then every 15 minutes (picomq-refresh).
# Leaves are re-issued by any apply within cert_early_renewal_hours of
# their expiry; the CA lives ca_validity_hours, far longer than its leaves.

resource "tls_private_key" "ca" {
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_self_signed_cert" "ca" {
  private_key_pem       = tls_private_key.ca.private_key_pem
  is_ca_certificate     = true
  validity_period_hours = var.ca_validity_hours
  allowed_uses          = ["cert_signing", "crl_signing", "digital_signature"]
  subject {
    common_name  = "${var.name} PicoMQ CA"
    organization = "PicoMQ"
  }
}

# etcd members: one certificate each, for both the client and the peer port.
resource "tls_private_key" "etcd" {
  count       = 3
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_cert_request" "etcd" {
  count           = 3
  private_key_pem = tls_private_key.etcd[count.index].private_key_pem
  ip_addresses    = [aws_network_interface.etcd[count.index].private_ip, "127.0.0.1"]
  dns_names       = [local.etcd_names[count.index], "localhost"]
  subject {
    common_name = local.etcd_names[count.index]
  }
}

resource "tls_locally_signed_cert" "etcd" {
  count                 = 3
  cert_request_pem      = tls_cert_request.etcd[count.index].cert_request_pem
  ca_private_key_pem    = tls_private_key.ca.private_key_pem
  ca_cert_pem           = tls_self_signed_cert.ca.cert_pem
  validity_period_hours = var.cert_validity_hours
  early_renewal_hours   = var.cert_early_renewal_hours
  allowed_uses          = ["digital_signature", "key_encipherment", "server_auth", "client_auth"]
}

# Each PicoMQ node's etcd client certificate, its node name as the common
# name (etcd's user name when etcd authentication is on): a node's identity
# towards etcd is its own, and one node's key revokes alone.
resource "tls_private_key" "etcd_client" {
  count       = var.node_count
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_cert_request" "etcd_client" {
  count           = var.node_count
  private_key_pem = tls_private_key.etcd_client[count.index].private_key_pem
  subject {
    common_name = local.node_names[count.index]
  }
}

resource "tls_locally_signed_cert" "etcd_client" {
  count                 = var.node_count
  cert_request_pem      = tls_cert_request.etcd_client[count.index].cert_request_pem
  ca_private_key_pem    = tls_private_key.ca.private_key_pem
  ca_cert_pem           = tls_self_signed_cert.ca.cert_pem
  validity_period_hours = var.cert_validity_hours
  early_renewal_hours   = var.cert_early_renewal_hours
  allowed_uses          = ["digital_signature", "key_encipherment", "client_auth"]
}

# Each node's listener certificate: its private IP plus tls_dns_names.
resource "tls_private_key" "node" {
  count       = var.node_count
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_cert_request" "node" {
  count           = var.node_count
  private_key_pem = tls_private_key.node[count.index].private_key_pem
  ip_addresses    = [aws_network_interface.node[count.index].private_ip]
  dns_names       = concat([local.node_names[count.index]], var.tls_dns_names)
  subject {
    common_name = local.node_names[count.index]
  }
}

resource "tls_locally_signed_cert" "node" {
  count                 = var.node_count
  cert_request_pem      = tls_cert_request.node[count.index].cert_request_pem
  ca_private_key_pem    = tls_private_key.ca.private_key_pem
  ca_cert_pem           = tls_self_signed_cert.ca.cert_pem
  validity_period_hours = var.cert_validity_hours
  early_renewal_hours   = var.cert_early_renewal_hours
  # Server only: the CA also signs etcd's trusted clients, and a listener
  # certificate must not double as an etcd client certificate.
  allowed_uses = ["digital_signature", "key_encipherment", "server_auth"]
}

# --- SSM parameters the instances read at boot

resource "aws_ssm_parameter" "ca" {
  for_each = toset(["etcd", "nodes"])
  name     = "${local.param_prefix}/${each.key}/ca.crt"
  type     = "String"
  value    = tls_self_signed_cert.ca.cert_pem
  tags     = local.tags
}

resource "aws_ssm_parameter" "etcd_cert" {
  count = 3
  name  = "${local.param_prefix}/etcd/${local.etcd_names[count.index]}.crt"
  type  = "String"
  value = tls_locally_signed_cert.etcd[count.index].cert_pem
  tags  = local.tags
}

resource "aws_ssm_parameter" "etcd_key" {
  count = 3
  name  = "${local.param_prefix}/etcd/${local.etcd_names[count.index]}.key"
  type  = "SecureString"
  value = tls_private_key.etcd[count.index].private_key_pem
  tags  = local.tags
}

resource "aws_ssm_parameter" "etcd_client_cert" {
  count = var.node_count
  name  = "${local.param_prefix}/nodes/${local.node_names[count.index]}.etcd-client.crt"
  type  = "String"
  value = tls_locally_signed_cert.etcd_client[count.index].cert_pem
  tags  = local.tags
}

resource "aws_ssm_parameter" "etcd_client_key" {
  count = var.node_count
  name  = "${local.param_prefix}/nodes/${local.node_names[count.index]}.etcd-client.key"
  type  = "SecureString"
  value = tls_private_key.etcd_client[count.index].private_key_pem
  tags  = local.tags
}

resource "aws_ssm_parameter" "node_cert" {
  count = var.node_count
  name  = "${local.param_prefix}/nodes/${local.node_names[count.index]}.crt"
  type  = "String"
  # The chain: node certificate, then the CA.
  value = "${tls_locally_signed_cert.node[count.index].cert_pem}${tls_self_signed_cert.ca.cert_pem}"
  tags  = local.tags
}

resource "aws_ssm_parameter" "node_key" {
  count = var.node_count
  name  = "${local.param_prefix}/nodes/${local.node_names[count.index]}.key"
  type  = "SecureString"
  value = tls_private_key.node[count.index].private_key_pem
  tags  = local.tags
}

# Auth tokens: a generated admin token unless the operator manages the
# tokens file in their own parameter (auth_tokens_parameter).
resource "random_password" "admin_token" {
  count   = var.auth_tokens_parameter == "" ? 1 : 0
  length  = 48
  special = false
}

# The token file holds only the token's SHA-256 (docs/configuration.md,
# --auth-tokens); the token itself goes to a parameter the nodes cannot read.
resource "aws_ssm_parameter" "auth_tokens" {
  count = var.auth_tokens_parameter == "" ? 1 : 0
  name  = "${local.param_prefix}/nodes/auth-tokens"
  type  = "SecureString"
  value = yamlencode({ tokens = [{ name = "admin", sha256 = sha256(random_password.admin_token[0].result), scopes = ["admin:/"] }] })
  tags  = local.tags
}

resource "aws_ssm_parameter" "admin_token" {
  count = var.auth_tokens_parameter == "" ? 1 : 0
  name  = "${local.param_prefix}/admin-token"
  type  = "SecureString"
  value = random_password.admin_token[0].result
  tags  = local.tags
}

locals {
  auth_tokens_parameter = var.auth_tokens_parameter != "" ? var.auth_tokens_parameter : aws_ssm_parameter.auth_tokens[0].name
}
