"""The KCL multilang protocol with one processor child: wire format, conversation, the child's driver."""
