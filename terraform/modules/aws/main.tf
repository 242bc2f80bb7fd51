# PicoMQ on AWS: an S3 bucket for segments, three etcd members on their own
# instances, N PicoMQ nodes on NVMe instances, TLS and token auth on every
# listener. docs/operations.md walks through it.

data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

data "aws_partition" "current" {}

data "aws_subnet" "selected" {
  count = length(var.subnet_ids)
  id    = var.subnet_ids[count.index]
}

data "aws_ssm_parameter" "al2023" {
  name = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.architecture}"
}

locals {
  ami         = var.ami_id != "" ? var.ami_id : data.aws_ssm_parameter.al2023.value
  region      = data.aws_region.current.name
  bucket_name = var.bucket_name != "" ? var.bucket_name : "${var.name}-segments-${data.aws_caller_identity.current.account_id}"
  # The bucket the nodes write to: the directory bucket when S3 Express
  # One Zone is chosen, else the regional one.
  data_bucket = var.express_one_zone_az_id != "" ? aws_s3_directory_bucket.express[0].bucket : aws_s3_bucket.segments.id
  # A directory bucket encrypts with its own default (SSE-S3): a KMS key
  # header it has no configuration for is a 400 on every PUT, so S3
  # Express gets no sse parameters (kms_key_arn covers the regional bucket).
  sse_query = var.express_one_zone_az_id != "" ? "" : (
    var.kms_key_arn != "" ? "&sse=aws:kms&sse_kms_key_id=${urlencode(var.kms_key_arn)}" : "&sse=AES256"
  )
  object_store_url = "s3://${local.data_bucket}/${var.name}?region=${local.region}${local.sse_query}"

  # etcd snapshots: beside the nodes' prefix, not under it, so the nodes'
  # policy (which may delete under <name>/) cannot touch them.
  etcd_backup_prefix = "${var.name}-etcd-backups"

  param_prefix   = "/${var.name}"
  etcd_names     = [for i in range(3) : "${var.name}-etcd-${i}"]
  node_names     = [for i in range(var.node_count) : "${var.name}-node-${i}"]
  etcd_endpoints = [for eni in aws_network_interface.etcd : "https://${eni.private_ip}:2379"]

  tags = merge({ "picomq:cluster" = var.name }, var.tags)
}

# --- security groups: the only ingress is HTTP (+ Kafka) from allowed_cidrs

resource "aws_security_group" "nodes" {
  name        = "${var.name}-nodes"
  description = "PicoMQ nodes: HTTP and Kafka listeners from allowed_cidrs only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-nodes" })
}

resource "aws_vpc_security_group_ingress_rule" "http" {
  for_each          = toset(var.allowed_cidrs)
  security_group_id = aws_security_group.nodes.id
  description       = "PicoMQ HTTP (TLS, token auth)"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = var.http_port
  to_port           = var.http_port
}

resource "aws_vpc_security_group_ingress_rule" "kafka" {
  for_each          = var.kafka_enabled ? toset(var.allowed_cidrs) : toset([])
  security_group_id = aws_security_group.nodes.id
  description       = "PicoMQ Kafka listener (TLS, token auth)"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
}

# Nodes reach each other's HTTP listener (redirect targets, drains).
resource "aws_vpc_security_group_ingress_rule" "http_between_nodes" {
  security_group_id            = aws_security_group.nodes.id
  description                  = "PicoMQ HTTP between nodes"
  referenced_security_group_id = aws_security_group.nodes.id
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.http_port
}

resource "aws_vpc_security_group_egress_rule" "nodes_all" {
  security_group_id = aws_security_group.nodes.id
  description       = "S3, SSM, etcd, package and release downloads"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
}

resource "aws_security_group" "etcd" {
  name        = "${var.name}-etcd"
  description = "etcd members: client port from PicoMQ nodes, peer port among members"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-etcd" })
}

resource "aws_vpc_security_group_ingress_rule" "etcd_clients" {
  security_group_id            = aws_security_group.etcd.id
  description                  = "etcd client port (mutual TLS) from PicoMQ nodes"
  referenced_security_group_id = aws_security_group.nodes.id
  ip_protocol                  = "tcp"
  from_port                    = 2379
  to_port                      = 2379
}

resource "aws_vpc_security_group_ingress_rule" "etcd_peers" {
  security_group_id            = aws_security_group.etcd.id
  description                  = "etcd client and peer ports (mutual TLS) among members"
  referenced_security_group_id = aws_security_group.etcd.id
  ip_protocol                  = "tcp"
  from_port                    = 2379
  to_port                      = 2380
}

resource "aws_vpc_security_group_egress_rule" "etcd_all" {
  security_group_id = aws_security_group.etcd.id
  description       = "SSM, release download, peers"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
}
