// A Swift executable that does nothing: the floor a `federate credentials` cache hit is compared against.
