terraform {
  required_providers {
    fediversity = {
      source = "fediversity/fediversity"
    }
  }
}
