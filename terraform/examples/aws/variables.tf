variable "region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Cluster name (resource prefix)."
  type        = string
  default     = "picomq"
}

variable "vpc_id" {
  description = "Existing VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets in three availability zones."
  type        = list(string)
}

variable "allowed_cidrs" {
  description = "Client networks allowed to reach the nodes."
  type        = list(string)
}

variable "node_count" {
  description = "Number of PicoMQ nodes."
  type        = number
  default     = 3
}

variable "node_instance_type" {
  description = "NVMe instance type of the nodes."
  type        = string
  default     = "i4i.large"
}

variable "architecture" {
  description = "x86_64 or arm64 (must match the instance type and the binary)."
  type        = string
  default     = "x86_64"
}

variable "binary_url" {
  description = "URL of the picomq release binary (make release)."
  type        = string
}

variable "binary_sha256" {
  description = "SHA-256 of that binary (SHA256SUMS of the release)."
  type        = string
}

variable "etcd_sha256" {
  description = "SHA-256 of the etcd release tarball."
  type        = string
}
