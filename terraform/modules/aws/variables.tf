# Every variable is documented in docs/operations.md ("Module variables");
# terraform/tests checks that the two agree.

variable "name" {
  description = "Name of the cluster: prefix of every resource, the SSM parameter path (/<name>/...) and the S3 key prefix."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower-case letters, digits and '-', starting with a letter."
  }
}

variable "vpc_id" {
  description = "VPC to deploy into."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  description = "Private subnets, ideally one per availability zone; nodes and etcd members are spread over them round-robin."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 1 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must hold at least one subnet id (subnet-...); use three in different zones for zone redundancy."
  }
}

variable "allowed_cidrs" {
  description = "CIDR blocks allowed to reach the HTTP listener (and the Kafka listener when kafka_enabled). Nothing else is exposed."
  type        = list(string)

  validation {
    condition     = length(var.allowed_cidrs) >= 1 && alltrue([for c in var.allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "allowed_cidrs must hold at least one valid CIDR block."
  }
}

variable "node_count" {
  description = "Number of PicoMQ nodes (fixed-count instances with stable names, addresses and certificates)."
  type        = number
  default     = 3

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 64 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number between 1 and 64."
  }
}

variable "node_instance_type" {
  description = "Instance type of the PicoMQ nodes; it must have local NVMe instance storage for the WAL (i4i, i7ie, i8g, im4gn, is4gen, or a 'd' type such as m6id, c7gd, r7gd)."
  type        = string
  default     = "i4i.large"

  validation {
    condition     = can(regex("^(i[0-9][a-z]*|im4gn|is4gen|[a-z]+[0-9][a-z]*d[a-z]*)\\.[a-z0-9]+$", var.node_instance_type))
    error_message = "node_instance_type must be a type with NVMe instance storage (i4i.*, i7ie.*, m6id.*, c7gd.*, ...)."
  }
}

variable "architecture" {
  description = "CPU architecture of all instances and of the binary: x86_64 or arm64. It must match both instance types."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI of all instances; empty means the latest Amazon Linux 2023 for the architecture."
  type        = string
  default     = ""

  validation {
    condition     = var.ami_id == "" || can(regex("^ami-[0-9a-f]+$", var.ami_id))
    error_message = "ami_id must be empty or look like ami-0123abcd."
  }
}

variable "root_volume_size_gb" {
  description = "Size of each instance's encrypted gp3 root volume in GiB (the OS and logs; the WAL is on NVMe)."
  type        = number
  default     = 20

  validation {
    condition     = var.root_volume_size_gb >= 8 && var.root_volume_size_gb <= 1024
    error_message = "root_volume_size_gb must be between 8 and 1024."
  }
}

variable "binary_url" {
  description = "HTTPS URL of the picomq linux binary for the architecture (a `make release` artifact). Exactly one of binary_url and binary_s3_uri must be set."
  type        = string
  default     = ""

  validation {
    condition     = var.binary_url == "" || can(regex("^https://", var.binary_url))
    error_message = "binary_url must be empty or an https:// URL."
  }
}

variable "binary_s3_uri" {
  description = "s3://bucket/key of the picomq linux binary; the nodes' role may read exactly that object. Exactly one of binary_url and binary_s3_uri must be set."
  type        = string
  default     = ""

  validation {
    condition     = var.binary_s3_uri == "" || can(regex("^s3://[a-z0-9][a-z0-9.-]+/.+", var.binary_s3_uri))
    error_message = "binary_s3_uri must be empty or s3://bucket/key."
  }
}

variable "binary_sha256" {
  description = "SHA-256 of the binary (from the release's SHA256SUMS); cloud-init refuses a binary that does not match."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.binary_sha256))
    error_message = "binary_sha256 must be 64 lower-case hex digits."
  }
}

variable "http_port" {
  description = "Port of the HTTP listener (Pico protocol, /metrics, /readyz), TLS and token auth always on."
  type        = number
  default     = 4437

  validation {
    condition     = var.http_port >= 1024 && var.http_port <= 65535
    error_message = "http_port must be between 1024 and 65535."
  }
}

variable "kafka_enabled" {
  description = "Run the Kafka listener on kafka_port and open it to allowed_cidrs (TLS with the node certificate; clients authenticate with SASL PLAIN or OAUTHBEARER using the same tokens)."
  type        = bool
  default     = true
}

variable "kafka_port" {
  description = "Port of the Kafka listener when kafka_enabled."
  type        = number
  default     = 9092

  validation {
    condition     = var.kafka_port >= 1024 && var.kafka_port <= 65535
    error_message = "kafka_port must be between 1024 and 65535."
  }
}

variable "durability" {
  description = "Default ack level of new streams: local (after the WAL fsync on NVMe) or object (after upload to S3 and the etcd commit)."
  type        = string
  default     = "local"

  validation {
    condition     = contains(["local", "object"], var.durability)
    error_message = "durability must be local or object."
  }
}

variable "seal_max_age" {
  description = "Flush interval (Go duration): bounds the loss window of local-durability appends when a node dies, and sets the PUT rate."
  type        = string
  default     = "1s"

  validation {
    condition     = can(regex("^[0-9]+(ms|s|m)$", var.seal_max_age))
    error_message = "seal_max_age must be a duration like 250ms, 1s or 1m."
  }
}

variable "seal_max_bytes" {
  description = "Flush as soon as this many bytes are pending on a node."
  type        = number
  default     = 8388608

  validation {
    condition     = var.seal_max_bytes >= 4096 && var.seal_max_bytes <= 1073741824
    error_message = "seal_max_bytes must be between 4096 and 1073741824."
  }
}

variable "lease_ttl" {
  description = "etcd membership lease (Go duration): how long a dead node keeps its streams before another takes them over."
  type        = string
  default     = "5s"

  validation {
    condition     = can(regex("^[0-9]+(s|m)$", var.lease_ttl))
    error_message = "lease_ttl must be a duration like 5s or 1m (between 2s and 1m)."
  }
}

variable "wal_max_bytes" {
  description = "Un-uploaded bytes a node may hold in its WAL while S3 is unreachable; keep it below the NVMe size."
  type        = number
  default     = 107374182400

  validation {
    condition     = var.wal_max_bytes >= 1073741824
    error_message = "wal_max_bytes must be at least 1 GiB."
  }
}

variable "cache_bytes" {
  description = "Size of each node's object read cache in bytes (memory)."
  type        = number
  default     = 2147483648

  validation {
    condition     = var.cache_bytes >= 0
    error_message = "cache_bytes must not be negative."
  }
}

variable "shutdown_timeout" {
  description = "Bound of a stopping node's whole shutdown (Go duration): the drain (at most 30s; what it does not hand over is taken over after lease_ttl), in-flight requests and the final flush; the systemd stop timeout (180s) stays above it."
  type        = string
  default     = "30s"

  validation {
    condition     = can(regex("^[0-9]+(s|m)$", var.shutdown_timeout))
    error_message = "shutdown_timeout must be a duration like 30s."
  }
}

variable "bucket_name" {
  description = "Name of the S3 bucket for segments; empty means <name>-segments-<account id>."
  type        = string
  default     = ""

  validation {
    condition     = var.bucket_name == "" || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be empty or a valid S3 bucket name."
  }
}

variable "bucket_force_destroy" {
  description = "Let `tofu destroy` delete the bucket with its objects (all stream history). Keep false in production."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "KMS key for SSE-KMS of the bucket and of every PUT; empty means SSE-S3 (AES256)."
  type        = string
  default     = ""

  validation {
    condition     = var.kms_key_arn == "" || can(regex("^arn:aws[a-z-]*:kms:", var.kms_key_arn))
    error_message = "kms_key_arn must be empty or a KMS key ARN."
  }
}

variable "incomplete_upload_days" {
  description = "Days after which the bucket's lifecycle rule aborts incomplete multipart uploads."
  type        = number
  default     = 2

  validation {
    condition     = var.incomplete_upload_days >= 1 && var.incomplete_upload_days <= 30
    error_message = "incomplete_upload_days must be between 1 and 30."
  }
}

variable "s3_gateway_route_table_ids" {
  description = "Route tables of subnet_ids to attach an S3 gateway VPC endpoint to, so that segment traffic stays off the NAT (no data processing charge, no NAT bandwidth limit). Empty: no endpoint (use one the VPC already has)."
  type        = list(string)
  default     = []
}

variable "noncurrent_version_days" {
  description = "Days a deleted or overwritten object's previous version is kept (bucket versioning is on): the window in which operations.md's corrupt-object remedy and an etcd restore can bring back objects deleted after a snapshot."
  type        = number
  default     = 7

  validation {
    condition     = var.noncurrent_version_days >= 1 && var.noncurrent_version_days <= 365
    error_message = "noncurrent_version_days must be between 1 and 365."
  }
}

variable "etcd_backup_interval" {
  description = "How often each etcd member saves a snapshot to the bucket under <name>/etcd-backups/<member>/ (a systemd OnUnitActiveSec= time span, e.g. 1h, 30min)."
  type        = string
  default     = "1h"

  validation {
    condition     = can(regex("^[0-9]+(s|min|h|d)$", var.etcd_backup_interval))
    error_message = "etcd_backup_interval must be a number followed by s, min, h or d (e.g. 1h)."
  }
}

variable "etcd_backup_retention_days" {
  description = "Days the bucket keeps an etcd snapshot before its lifecycle rule deletes it."
  type        = number
  default     = 14

  validation {
    condition     = var.etcd_backup_retention_days >= 1 && var.etcd_backup_retention_days <= 3650
    error_message = "etcd_backup_retention_days must be between 1 and 3650."
  }
}

variable "etcd_replace_members" {
  description = "Names of etcd members (<name>-etcd-<i>) being replaced: their instance joins the running cluster (--initial-cluster-state existing, after `etcdctl member add`) with an empty data dir instead of bootstrapping a new cluster. See operations.md, \"Replace an etcd member\"."
  type        = list(string)
  default     = []
}

variable "express_one_zone_az_id" {
  description = "Availability zone id (e.g. use1-az4) for an S3 Express One Zone directory bucket that the nodes use instead of the regional bucket (lower-latency flushes, single-zone data). Empty: regional bucket only."
  type        = string
  default     = ""

  validation {
    condition     = var.express_one_zone_az_id == "" || can(regex("^[a-z]+[0-9]-az[0-9]+$", var.express_one_zone_az_id))
    error_message = "express_one_zone_az_id must be empty or a zone id like use1-az4."
  }
}

variable "auth_tokens_parameter" {
  description = "Name of an existing SecureString SSM parameter holding the token file (hashes and scopes, see `picomq token`); empty means the module creates one with one generated admin token, stored in the parameter named by the admin_token_parameter output."
  type        = string
  default     = ""

  validation {
    condition     = var.auth_tokens_parameter == "" || can(regex("^/", var.auth_tokens_parameter))
    error_message = "auth_tokens_parameter must be empty or an SSM parameter name starting with /."
  }
}

variable "tls_dns_names" {
  description = "Extra DNS names for the node certificates (a load balancer or DNS name clients use); the node's private IP is always included."
  type        = list(string)
  default     = []
}

variable "cert_validity_hours" {
  description = "Validity of the leaf certificates the module issues (etcd members, the nodes' etcd client, node listeners). An apply within cert_early_renewal_hours of their expiry re-issues them; the nodes pick them up from SSM within 15 minutes and reload."
  type        = number
  default     = 8760

  validation {
    condition     = var.cert_validity_hours >= 24
    error_message = "cert_validity_hours must be at least 24."
  }
}

variable "cert_early_renewal_hours" {
  description = "An apply this close to a leaf certificate's expiry re-issues it (the tls provider's early_renewal_hours). Apply at least every cert_validity_hours - cert_early_renewal_hours."
  type        = number
  default     = 2160

  validation {
    condition     = var.cert_early_renewal_hours >= 1 && var.cert_early_renewal_hours < var.cert_validity_hours
    error_message = "cert_early_renewal_hours must be at least 1 and below cert_validity_hours."
  }
}

variable "ca_validity_hours" {
  description = "Validity of the cluster CA, which must outlive every leaf it signs (default ten years). Replacing the CA is a planned rotation (docs/operations.md)."
  type        = number
  default     = 87600

  validation {
    condition     = var.ca_validity_hours > var.cert_validity_hours
    error_message = "ca_validity_hours must be longer than cert_validity_hours."
  }
}

variable "etcd_instance_type" {
  description = "Instance type of the three etcd members (etcd runs on its own instances, never co-located with PicoMQ)."
  type        = string
  default     = "t3.medium"
}

variable "etcd_volume_size_gb" {
  description = "Size of each etcd member's own encrypted gp3 data volume in GiB."
  type        = number
  default     = 20

  validation {
    condition     = var.etcd_volume_size_gb >= 8 && var.etcd_volume_size_gb <= 1024
    error_message = "etcd_volume_size_gb must be between 8 and 1024."
  }
}

variable "etcd_version" {
  description = "etcd release installed on the etcd members (3.6.x, the series PicoMQ's client is built against)."
  type        = string
  default     = "v3.6.6"

  validation {
    condition     = can(regex("^v3\\.6\\.[0-9]+$", var.etcd_version))
    error_message = "etcd_version must be a v3.6.x release."
  }
}

variable "etcd_download_url" {
  description = "URL of the etcd release tarball for etcd_version and the architecture; empty means the etcd project's release download."
  type        = string
  default     = ""
}

variable "etcd_sha256" {
  description = "SHA-256 of the etcd release tarball (from the release's SHA256SUMS)."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.etcd_sha256))
    error_message = "etcd_sha256 must be 64 lower-case hex digits."
  }
}

variable "enable_ssm_session_manager" {
  description = "Attach AmazonSSMManagedInstanceCore so operators reach instances with Session Manager (no SSH port is ever opened)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
