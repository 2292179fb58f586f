"""The step-time model: a profiled step (`profile`) or a roofline estimate of a GPU that is not
here (`roofline`) replayed with its swaps on a link of given speed (`steptime`)."""
