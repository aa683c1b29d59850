terraform {
  required_version = ">= 1.5"
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}
