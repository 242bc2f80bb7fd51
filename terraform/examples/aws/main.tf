# A three-node PicoMQ cluster in an existing VPC (docs/operations.md,
# "Deploying on AWS with Terraform"):
#
#   cp terraform.tfvars.example terraform.tfvars   # then edit
#   tofu init && tofu apply                        # or terraform
provider "aws" {
  region = var.region
}

module "picomq" {
  source = "../../modules/aws"

  name          = var.name
  vpc_id        = var.vpc_id
  subnet_ids    = var.subnet_ids
  allowed_cidrs = var.allowed_cidrs

  node_count         = var.node_count
  node_instance_type = var.node_instance_type
  architecture       = var.architecture

  binary_url    = var.binary_url
  binary_sha256 = var.binary_sha256
  etcd_sha256   = var.etcd_sha256
}
