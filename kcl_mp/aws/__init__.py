"""The only code that knows boto3 and botocore: clients, credentials, and AWS errors as ours."""
