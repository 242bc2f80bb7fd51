# PicoMQ nodes: fixed count, spread over the subnets (zones) round-robin,
# each with a stable name (its node-id), a fixed private address (an ENI:
# its advertise URL and certificate) and the NVMe instance store as WAL.

resource "aws_network_interface" "node" {
  count           = var.node_count
  subnet_id       = var.subnet_ids[count.index % length(var.subnet_ids)]
  security_groups = [aws_security_group.nodes.id]
  tags            = merge(local.tags, { Name = local.node_names[count.index] })
}

resource "aws_instance" "node" {
  count                = var.node_count
  ami                  = local.ami
  instance_type        = var.node_instance_type
  iam_instance_profile = aws_iam_instance_profile.nodes[count.index].name

  network_interface {
    network_interface_id = aws_network_interface.node[count.index].id
    device_index         = 0
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = var.root_volume_size_gb
    encrypted   = true
  }

  user_data = templatefile("${path.module}/../../../deploy/cloud-init/picomq-node.sh.tftpl", {
    # Steps for a real machine: always on here (the switches exist for
    # terraform/tests, which runs the script against a scratch directory).
    root_dir         = ""
    install_packages = true
    mount_nvme       = true
    start_service    = true
    aws_cli          = "aws"

    region           = local.region
    node_id          = local.node_names[count.index]
    private_ip       = aws_network_interface.node[count.index].private_ip
    listen_host      = "0.0.0.0"
    http_port        = var.http_port
    kafka_enabled    = var.kafka_enabled
    kafka_port       = var.kafka_port
    etcd_endpoints   = local.etcd_endpoints
    object_store_url = local.object_store_url
    binary_url       = var.binary_url
    binary_s3_uri    = var.binary_s3_uri
    binary_sha256    = var.binary_sha256
    durability       = var.durability
    seal_max_age     = var.seal_max_age
    seal_max_bytes   = var.seal_max_bytes
    lease_ttl        = var.lease_ttl
    wal_max_bytes    = var.wal_max_bytes
    cache_bytes      = var.cache_bytes
    shutdown_timeout = var.shutdown_timeout

    # Never an unauthenticated or plain-text listener.
    auth_enabled          = true
    auth_tokens_parameter = local.auth_tokens_parameter
    tls_enabled           = true
    tls_cert_parameter    = aws_ssm_parameter.node_cert[count.index].name
    tls_key_parameter     = aws_ssm_parameter.node_key[count.index].name
    etcd_ca_parameter     = aws_ssm_parameter.ca["nodes"].name
    etcd_cert_parameter   = aws_ssm_parameter.etcd_client_cert[count.index].name
    etcd_key_parameter    = aws_ssm_parameter.etcd_client_key[count.index].name

    unit            = file("${path.module}/../../../deploy/picomq.service")
    disks_script    = file("${path.module}/../../../deploy/picomq-disks.sh")
    disks_unit      = file("${path.module}/../../../deploy/picomq-disks.service")
    refresh_script  = file("${path.module}/../../../deploy/picomq-refresh.sh")
    refresh_service = file("${path.module}/../../../deploy/picomq-refresh.service")
    refresh_timer   = file("${path.module}/../../../deploy/picomq-refresh.timer")
  })

  tags = merge(local.tags, { Name = local.node_names[count.index], "picomq:role" = "node" })

  depends_on = [aws_instance.etcd, aws_iam_role_policy.nodes]

  lifecycle {
    # Upgrades are rolling and drained (docs/operations.md), never a
    # replacement of every node by one apply.
    ignore_changes = [ami, user_data]

    precondition {
      condition     = (var.binary_url != "") != (var.binary_s3_uri != "")
      error_message = "Set exactly one of binary_url and binary_s3_uri."
    }
  }
}
