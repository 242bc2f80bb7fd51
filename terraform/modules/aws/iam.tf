# Instance roles. The nodes' role may use the segment bucket (under the
# cluster's prefix), read the cluster's SSM parameters and, if given, the
# binary object; the etcd role only its own parameters and the writing of
# its snapshots. Credentials reach
# the processes through the instance profile over IMDSv2 only.

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

locals {
  binary_s3_arn = var.binary_s3_uri != "" ? "arn:${data.aws_partition.current.partition}:s3:::${trimprefix(var.binary_s3_uri, "s3://")}" : ""
}

# One role per node: a node reads its own certificates and keys in SSM
# (listener, etcd client), not its neighbours' (the segment bucket, the CA
# and the token file are the same for all).
data "aws_iam_policy_document" "nodes" {
  count = var.node_count
  statement {
    sid       = "ListSegments"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.segments.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.name}/*", var.name]
    }
  }
  statement {
    sid = "ReadWriteSegments"
    # No multipart: every object is one PUT (at most seal_max_bytes, 1 GiB,
    # under S3's 5 GiB single-PUT limit), the request that carries the
    # conditional create (tiering/objstore/s3).
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${aws_s3_bucket.segments.arn}/${var.name}/*"]
  }
  dynamic "statement" {
    for_each = var.express_one_zone_az_id != "" ? [1] : []
    content {
      sid       = "ExpressSession"
      actions   = ["s3express:CreateSession"]
      resources = [aws_s3_directory_bucket.express[0].arn]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn != "" ? [1] : []
    content {
      sid       = "SegmentKey"
      actions   = ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"]
      resources = [var.kms_key_arn]
    }
  }
  dynamic "statement" {
    for_each = var.binary_s3_uri != "" ? [1] : []
    content {
      sid       = "ReadBinary"
      actions   = ["s3:GetObject"]
      resources = [local.binary_s3_arn]
    }
  }
  statement {
    sid     = "ClusterParameters"
    actions = ["ssm:GetParameter"]
    resources = [for p in concat(
      [for f in ["${local.node_names[count.index]}.crt", "${local.node_names[count.index]}.key", "${local.node_names[count.index]}.etcd-client.crt", "${local.node_names[count.index]}.etcd-client.key", "ca.crt"] : "${local.param_prefix}/nodes/${f}"],
      [local.auth_tokens_parameter]
    ) : "arn:${data.aws_partition.current.partition}:ssm:${local.region}:${data.aws_caller_identity.current.account_id}:parameter${p}"]
  }
}

data "aws_iam_policy_document" "etcd" {
  statement {
    sid       = "MemberParameters"
    actions   = ["ssm:GetParameter"]
    resources = ["arn:${data.aws_partition.current.partition}:ssm:${local.region}:${data.aws_caller_identity.current.account_id}:parameter${local.param_prefix}/etcd/*"]
  }
  # etcd-backup.timer: each member writes its snapshots; the bucket's
  # lifecycle rule deletes them (no delete or list needed here).
  statement {
    sid       = "WriteSnapshots"
    actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.segments.arn}/${local.etcd_backup_prefix}/*"]
  }
  dynamic "statement" {
    for_each = var.kms_key_arn != "" ? [1] : []
    content {
      sid       = "SnapshotKey"
      actions   = ["kms:GenerateDataKey"]
      resources = [var.kms_key_arn]
    }
  }
}

resource "aws_iam_role" "nodes" {
  count              = var.node_count
  name               = local.node_names[count.index]
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "nodes" {
  count  = var.node_count
  name   = "picomq-node"
  role   = aws_iam_role.nodes[count.index].id
  policy = data.aws_iam_policy_document.nodes[count.index].json
}

resource "aws_iam_instance_profile" "nodes" {
  count = var.node_count
  name  = local.node_names[count.index]
  role  = aws_iam_role.nodes[count.index].name
  tags  = local.tags
}

resource "aws_iam_role" "etcd" {
  name               = "${var.name}-etcd"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "etcd" {
  name   = "picomq-etcd"
  role   = aws_iam_role.etcd.id
  policy = data.aws_iam_policy_document.etcd.json
}

resource "aws_iam_instance_profile" "etcd" {
  name = "${var.name}-etcd"
  role = aws_iam_role.etcd.name
  tags = local.tags
}

resource "aws_iam_role_policy_attachment" "ssm_core" {
  for_each   = var.enable_ssm_session_manager ? merge({ for i, n in local.node_names : n => aws_iam_role.nodes[i].name }, { etcd = aws_iam_role.etcd.name }) : {}
  role       = each.value
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}
