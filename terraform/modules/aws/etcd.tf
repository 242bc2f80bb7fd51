# Three etcd members on their own small instances (not co-located with
# PicoMQ: scaling or replacing PicoMQ nodes never touches etcd's quorum),
# one per subnet round-robin, each with its own encrypted EBS data volume
# and a fixed private address (an ENI) that its certificate names.

locals {
  etcd_arch = var.architecture == "x86_64" ? "amd64" : "arm64"
  etcd_url = var.etcd_download_url != "" ? var.etcd_download_url : (
    "https://github.com/etcd-io/etcd/releases/download/${var.etcd_version}/etcd-${var.etcd_version}-linux-${local.etcd_arch}.tar.gz"
  )
  etcd_initial_cluster = join(",", [for i, eni in aws_network_interface.etcd : "${local.etcd_names[i]}=https://${eni.private_ip}:2380"])
}

resource "aws_network_interface" "etcd" {
  count           = 3
  subnet_id       = var.subnet_ids[count.index % length(var.subnet_ids)]
  security_groups = [aws_security_group.etcd.id]
  tags            = merge(local.tags, { Name = local.etcd_names[count.index] })
}

resource "aws_ebs_volume" "etcd" {
  count             = 3
  availability_zone = data.aws_subnet.selected[count.index % length(var.subnet_ids)].availability_zone
  size              = var.etcd_volume_size_gb
  type              = "gp3"
  encrypted         = true
  tags              = merge(local.tags, { Name = "${local.etcd_names[count.index]}-data" })
}

resource "aws_instance" "etcd" {
  count                = 3
  ami                  = local.ami
  instance_type        = var.etcd_instance_type
  iam_instance_profile = aws_iam_instance_profile.etcd.name

  network_interface {
    network_interface_id = aws_network_interface.etcd[count.index].id
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

  user_data = templatefile("${path.module}/../../../deploy/cloud-init/etcd-node.sh.tftpl", {
    aws_cli         = "aws"
    region          = local.region
    name            = local.etcd_names[count.index]
    private_ip      = aws_network_interface.etcd[count.index].private_ip
    initial_cluster = local.etcd_initial_cluster
    cluster_token   = "${var.name}-etcd"
    data_volume_id  = aws_ebs_volume.etcd[count.index].id
    etcd_url        = local.etcd_url
    etcd_sha256     = var.etcd_sha256
    cluster_state   = contains(var.etcd_replace_members, local.etcd_names[count.index]) ? "existing" : "new"
    backup_uri      = "s3://${aws_s3_bucket.segments.id}/${local.etcd_backup_prefix}/${local.etcd_names[count.index]}"
    backup_interval = var.etcd_backup_interval
    backup_script   = file("${path.module}/../../../deploy/etcd-backup.sh")
    refresh_script  = file("${path.module}/../../../deploy/picomq-refresh.sh")
    run_auth        = count.index == 0
    auth_script     = file("${path.module}/../../../deploy/etcd-auth.sh")
    picomq_nodes    = join(" ", local.node_names)
    etcd_members    = join(" ", local.etcd_names)
    ca_parameter    = aws_ssm_parameter.ca["etcd"].name
    cert_parameter  = aws_ssm_parameter.etcd_cert[count.index].name
    key_parameter   = aws_ssm_parameter.etcd_key[count.index].name
  })

  tags = merge(local.tags, { Name = local.etcd_names[count.index], "picomq:role" = "etcd" })

  lifecycle {
    # A new AMI must not silently replace a quorum member.
    ignore_changes = [ami, user_data]
  }
}

resource "aws_volume_attachment" "etcd" {
  count       = 3
  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.etcd[count.index].id
  instance_id = aws_instance.etcd[count.index].id
}
