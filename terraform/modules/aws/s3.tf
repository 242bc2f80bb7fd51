# The segment bucket: private, encrypted, versioned (a deleted object stays
# recoverable for noncurrent_version_days: the corrupt-object remedy and an
# etcd restore rely on it), incomplete multipart uploads cleaned up, etcd
# snapshots expired after etcd_backup_retention_days.

resource "aws_s3_bucket" "segments" {
  bucket        = local.bucket_name
  force_destroy = var.bucket_force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_ownership_controls" "segments" {
  bucket = aws_s3_bucket.segments.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "segments" {
  bucket                  = aws_s3_bucket.segments.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "segments" {
  bucket = aws_s3_bucket.segments.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "segments" {
  bucket = aws_s3_bucket.segments.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn != "" ? "aws:kms" : "AES256"
      kms_master_key_id = var.kms_key_arn != "" ? var.kms_key_arn : null
    }
    bucket_key_enabled = var.kms_key_arn != ""
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "segments" {
  bucket     = aws_s3_bucket.segments.id
  depends_on = [aws_s3_bucket_versioning.segments]
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.incomplete_upload_days
    }
  }
  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_days
    }
    expiration {
      expired_object_delete_marker = true
    }
  }
  rule {
    id     = "expire-etcd-snapshots"
    status = "Enabled"
    filter {
      prefix = "${local.etcd_backup_prefix}/"
    }
    expiration {
      days = var.etcd_backup_retention_days
    }
  }
}

# TLS only: any request over plain HTTP is refused.
resource "aws_s3_bucket_policy" "segments" {
  bucket     = aws_s3_bucket.segments.id
  depends_on = [aws_s3_bucket_public_access_block.segments]
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "DenyInsecureTransport"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.segments.arn, "${aws_s3_bucket.segments.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })
}

# Optional S3 Express One Zone directory bucket next to the nodes
# (docs/storage.md): lower-latency PUTs for object-durability acks.
resource "aws_s3_directory_bucket" "express" {
  count         = var.express_one_zone_az_id != "" ? 1 : 0
  bucket        = "${var.name}--${var.express_one_zone_az_id}--x-s3"
  force_destroy = var.bucket_force_destroy
  location {
    name = var.express_one_zone_az_id
  }
}

# Optional S3 gateway endpoint: segment PUTs and GETs bypass the NAT.
resource "aws_vpc_endpoint" "s3" {
  count             = length(var.s3_gateway_route_table_ids) > 0 ? 1 : 0
  vpc_id            = var.vpc_id
  service_name      = "com.amazonaws.${local.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = var.s3_gateway_route_table_ids
  tags              = merge(local.tags, { Name = "${var.name}-s3" })
}
