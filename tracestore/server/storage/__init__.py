"""Where the bytes live: the store protocols (``blobs``) and their implementations, the
embedded directory (``local``, its part files in ``staging``) and S3 (``s3``, ``s3client``)."""
